package app_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/internal/config"
)

// TestStatusPageOfARealBroker loads a real broker's status page in
// headless Chromium: the page and the broker's /stats must agree on names.
func TestStatusPageOfARealBroker(t *testing.T) {
	var browser string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			browser = p
			break
		}
	}
	if browser == "" {
		if os.Getenv("MOONMQ_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("MOONMQ_REQUIRE_CHROMIUM=1 but no chromium (apt-get install chromium)")
		}
		t.Skip("chromium not installed")
	}
	in, _ := startLogged(t, func(s *config.Server) { s.MetricsPort = freeLoopbackPort(t) })
	cl := client(t, in.Addr(), kgo.DefaultProduceTopic("page-topic"), kgo.AllowAutoTopicCreation())
	for i := 0; i < 3; i++ {
		if err := cl.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", "http://"+in.MetricsAddr()+"/")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	dom := string(out)
	for _, want := range []string{`data-loaded="yes"`, `<span id="role">standalone</span>`, `<td>page-topic</td>`, `<td class="num">3</td>`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the status page does not show %s", want)
		}
	}
	if t.Failed() {
		t.Logf("page as rendered:\n%s", dom)
	}
}
