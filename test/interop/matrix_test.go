package interop

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestCompatibilityMatrix keeps docs/COMPATIBILITY.md true: every "yes"
// cell of its matrix is a driver × scenario that TestClientScenarios (or,
// for kafka-tools, TestKafkaTools) runs, and every cell those tests run
// says "yes".
func TestCompatibilityMatrix(t *testing.T) {
	doc, err := os.ReadFile("../../docs/COMPATIBILITY.md")
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	claimed := map[string]map[string]bool{}
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(l, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "client" {
			cols = cells
			continue
		}
		if cols == nil || strings.HasPrefix(cells[0], "---") || len(cells) != len(cols) {
			continue
		}
		claimed[cells[0]] = map[string]bool{}
		for i, c := range cols {
			if slices.ContainsFunc(scenarios, func(s scenario) bool { return s.name == c }) {
				claimed[cells[0]][c] = cells[i] == "yes"
			}
		}
	}
	if len(claimed) == 0 {
		t.Fatal("no matrix found in docs/COMPATIBILITY.md")
	}
	run := map[string]map[string]bool{}
	for _, d := range matrixDrivers(t) {
		run[d.name] = map[string]bool{}
		for _, s := range scenarios {
			run[d.name][s.name] = true
		}
	}
	run["kafka-tools"] = map[string]bool{}
	for _, s := range scenarios {
		run["kafka-tools"][s.name] = !s.kill // TestKafkaTools leaves the failover out
	}
	for client, cells := range claimed {
		if run[client] == nil {
			t.Errorf("docs/COMPATIBILITY.md lists %s, which no test runs", client)
			continue
		}
		for _, s := range scenarios {
			if cells[s.name] != run[client][s.name] {
				t.Errorf("docs/COMPATIBILITY.md says %s × %s is %v; the tests run it: %v", client, s.name, cells[s.name], run[client][s.name])
			}
		}
	}
	for client := range run {
		if claimed[client] == nil {
			t.Errorf("%s runs in the tests but has no row in docs/COMPATIBILITY.md", client)
		}
	}
}
