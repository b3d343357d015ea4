// Package deploy holds deployment examples (a Kubernetes StatefulSet for a
// three-replica group, a systemd unit) and the test that keeps them in step
// with the broker: the manifests parse, every embedded configuration is one
// the broker accepts, and names, ports and probe paths agree.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/moonmq/moonmq/internal/config"
	"github.com/moonmq/moonmq/internal/metrics"
)

// manifest is the part of a Kubernetes object the checks read.
type manifest struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		ClusterIP   string `yaml:"clusterIP"`
		ServiceName string `yaml:"serviceName"`
		Replicas    int    `yaml:"replicas"`
		Ports       []struct {
			Name string `yaml:"name"`
			Port int    `yaml:"port"`
		} `yaml:"ports"`
		Template struct {
			Spec struct {
				Containers []struct {
					Command []string `yaml:"command"`
					Ports   []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					LivenessProbe  probe `yaml:"livenessProbe"`
					ReadinessProbe probe `yaml:"readinessProbe"`
					VolumeMounts   []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name   string `yaml:"name"`
					Secret struct {
						SecretName string `yaml:"secretName"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

func readManifests(t *testing.T, path string) map[string]manifest {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	out := map[string]manifest{}
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if m.APIVersion == "" || m.Kind == "" || m.Metadata.Name == "" {
			t.Fatalf("%s: an object without apiVersion, kind or name: %+v", path, m)
		}
		out[m.Kind] = m
	}
	return out
}

func TestKubernetesStatefulSet(t *testing.T) {
	ms := readManifests(t, filepath.Join("kubernetes", "moonmq.yaml"))
	for _, kind := range []string{"Service", "Secret", "StatefulSet", "PodDisruptionBudget"} {
		if _, ok := ms[kind]; !ok {
			t.Fatalf("no %s in moonmq.yaml", kind)
		}
	}
	svc, secret, sts := ms["Service"], ms["Secret"], ms["StatefulSet"]
	if svc.Spec.ClusterIP != "None" || sts.Spec.ServiceName != svc.Metadata.Name {
		t.Fatalf("the StatefulSet's serviceName %q must name the headless Service %q", sts.Spec.ServiceName, svc.Metadata.Name)
	}
	if sts.Spec.Replicas != 3 {
		t.Fatalf("%d replicas; the example is a group of three", sts.Spec.Replicas)
	}
	svcPorts := map[string]int{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p.Port
	}
	c := sts.Spec.Template.Spec.Containers[0]
	ctrPorts := map[string]int{}
	for _, p := range c.Ports {
		ctrPorts[p.Name] = p.ContainerPort
	}

	// Every pod's configuration is one the broker accepts, and agrees with
	// the pod's name, its peers and the ports the manifests expose.
	for i := 0; i < sts.Spec.Replicas; i++ {
		pod := fmt.Sprintf("%s-%d", sts.Metadata.Name, i)
		js, ok := secret.StringData[pod+".json"]
		if !ok {
			t.Fatalf("the Secret has no %s.json", pod)
		}
		cfg, err := config.Parse([]byte(js))
		if err != nil {
			t.Fatalf("%s.json: %v", pod, err)
		}
		r := cfg.Replication
		if r == nil || !r.Enabled || !r.Failover.Enabled || r.ReplicaId != i+1 {
			t.Fatalf("%s.json: want failover replication with ReplicaId %d: %+v", pod, i+1, r)
		}
		dns := pod + "." + svc.Metadata.Name
		if r.ClientAddress != fmt.Sprintf("%s:%d", dns, cfg.Port) {
			t.Errorf("%s.json: ClientAddress %s, want %s:%d", pod, r.ClientAddress, dns, cfg.Port)
		}
		if len(r.Peers) != sts.Spec.Replicas-1 {
			t.Errorf("%s.json: %d peers", pod, len(r.Peers))
		}
		for _, p := range r.Peers {
			peer := fmt.Sprintf("%s-%d.%s", sts.Metadata.Name, p.Id-1, svc.Metadata.Name)
			if p.Address != fmt.Sprintf("%s:%d", peer, r.ReplicatePort) || p.ClientAddress != fmt.Sprintf("%s:%d", peer, cfg.Port) {
				t.Errorf("%s.json: peer %d is %s / %s, want %s", pod, p.Id, p.Address, p.ClientAddress, peer)
			}
		}
		for name, port := range map[string]int{"kafka": cfg.Port, "replication": r.ReplicatePort, "metrics": cfg.MetricsPort} {
			if svcPorts[name] != port || ctrPorts[name] != port {
				t.Errorf("%s.json: %s port %d, but the Service says %d and the container %d", pod, name, port, svcPorts[name], ctrPorts[name])
			}
		}
	}

	// The container reads its configuration where the Secret is mounted.
	cmd := strings.Join(c.Command, " ")
	mounted := ""
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret.SecretName == secret.Metadata.Name {
			for _, vm := range c.VolumeMounts {
				if vm.Name == v.Name {
					mounted = vm.MountPath
				}
			}
		}
	}
	if mounted == "" || !strings.Contains(cmd, "moonmq serve --config "+mounted+"/$(POD_NAME).json") {
		t.Errorf("the command %q does not read the configuration from the mounted Secret (%q)", cmd, mounted)
	}

	// The probes name endpoints the metrics port serves, and that its
	// login leaves open (a probe sends no token).
	cfg, err := config.Parse([]byte(secret.StringData[sts.Metadata.Name+"-0.json"]))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Metrics.HasLogin() {
		t.Error("the example's metrics port listens on every interface without Metrics.Token")
	}
	acc := metrics.Access{Token: cfg.Metrics.Token, Username: cfg.Metrics.Username, Password: cfg.Metrics.Password, ProtectMetrics: cfg.Metrics.ProtectMetrics}
	srv := httptest.NewServer(metrics.Handler(metrics.Source{Stats: func() any { return nil }, Registry: prometheus.NewRegistry(), Ready: func() (bool, string) { return true, "" }}, acc))
	defer srv.Close()
	for _, p := range []probe{c.LivenessProbe, c.ReadinessProbe} {
		if p.HTTPGet.Port != "metrics" {
			t.Errorf("probe %s is on port %q, not metrics", p.HTTPGet.Path, p.HTTPGet.Port)
		}
		resp, err := http.Get(srv.URL + p.HTTPGet.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("probe path %s answers %d", p.HTTPGet.Path, resp.StatusCode)
		}
	}
}

// unit is a systemd unit file: section -> key -> values.
type unit map[string]map[string][]string

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestSystemdUnit(t *testing.T) {
	path := filepath.Join("systemd", "moonmq.service")
	u := parseUnit(t, path)
	for _, s := range []string{"Unit", "Service", "Install"} {
		if u[s] == nil {
			t.Fatalf("no [%s] section", s)
		}
	}
	svc := u["Service"]
	start := svc["ExecStart"]
	if len(start) != 1 || !strings.HasPrefix(start[0], "/usr/local/bin/moonmq serve --config ") {
		t.Fatalf("ExecStart %q does not run `moonmq serve --config`", start)
	}
	cred := svc["LoadCredential"]
	if len(cred) != 1 || !strings.Contains(start[0], "${CREDENTIALS_DIRECTORY}/"+strings.SplitN(cred[0], ":", 2)[0]) {
		t.Errorf("ExecStart %q does not read the configuration LoadCredential (%q) provides", start, cred)
	}
	for k, want := range map[string]string{"KillSignal": "SIGTERM", "Restart": "on-failure", "StateDirectory": "moonmq"} {
		if got := svc[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%v, want %s", k, got, want)
		}
	}
	if got := u["Install"]["WantedBy"]; len(got) != 1 || got[0] != "multi-user.target" {
		t.Errorf("WantedBy=%v", got)
	}

	// Where systemd is installed, let it check the unit too (with the
	// binary path pointed at something that exists).
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: only the parse above checks the unit")
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	dir := t.TempDir()
	tmp := filepath.Join(dir, "moonmq.service")
	if err := os.WriteFile(tmp, bytes.ReplaceAll(data, []byte("/usr/local/bin/moonmq"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", tmp).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestLocalCluster: cluster/local.sh writes, for three groups, nine
// configurations the broker accepts, in three groups of three whose peers
// are each other, with the metadata voters every broker agrees on, and no
// two brokers on one port.
func TestLocalCluster(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash")
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", "cluster/local.sh", "start", "3")
	// A broker that exits at once: the script writes the configs and
	// starts it; nothing listens.
	cmd.Env = append(os.Environ(), "DIR="+dir, "MOONMQ=true")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("local.sh start 3: %v\n%s", err, out)
	}
	ports := map[int]int{}
	for id := 1; id <= 9; id++ {
		cfg, err := config.Load(filepath.Join(dir, fmt.Sprintf("broker-%d.json", id)))
		if err != nil {
			t.Fatalf("broker %d: %v", id, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("broker %d: %v", id, err)
		}
		c, r := cfg.Cluster, cfg.Replication
		group := fmt.Sprintf("g%d", (id-1)/3+1)
		if c == nil || c.BrokerId != id || c.GroupId != group || r.ReplicaId != id || len(r.Peers) != 2 {
			t.Fatalf("broker %d: cluster %+v, replication id %d with %d peers", id, c, r.ReplicaId, len(r.Peers))
		}
		for _, p := range r.Peers {
			if (p.Id-1)/3 != (id-1)/3 || p.Id == id {
				t.Fatalf("broker %d of %s has peer %d", id, group, p.Id)
			}
		}
		if len(c.MetadataVoters) != 3 {
			t.Fatalf("broker %d: %d metadata voters", id, len(c.MetadataVoters))
		}
		for _, port := range []int{cfg.Port, r.ReplicatePort, cfg.MetricsPort} {
			if other, taken := ports[port]; taken {
				t.Fatalf("port %d of broker %d is broker %d's too", port, id, other)
			}
			ports[port] = id
		}
	}
}
