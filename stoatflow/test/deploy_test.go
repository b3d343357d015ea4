package test

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/moonmq/moonmq/stoatflow"
)

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		ClusterIP      string `yaml:"clusterIP"`
		ServiceName    string `yaml:"serviceName"`
		Replicas       int    `yaml:"replicas"`
		UpdateStrategy struct {
			Type string `yaml:"type"`
		} `yaml:"updateStrategy"`
		Template struct {
			Spec struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				Containers                    []struct {
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					Env []struct {
						Name      string `yaml:"name"`
						Value     string `yaml:"value"`
						ValueFrom struct {
							FieldRef struct {
								FieldPath string `yaml:"fieldPath"`
							} `yaml:"fieldRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
					ReadinessProbe k8sProbe `yaml:"readinessProbe"`
					LivenessProbe  k8sProbe `yaml:"livenessProbe"`
					VolumeMounts   []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata struct {
				Name string `yaml:"name"`
			} `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// TestDeployKubernetes keeps the StatefulSet of the word-count example in
// step with the library: its environment is a configuration StoatFlow
// accepts, with the pod id from the downward API, probes on the HTTP port
// it serves, and the state volume where the state lives.
func TestDeployKubernetes(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "deploy", "kubernetes", "stoatflow-wordcount.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var svc, sts *k8sObject
	for {
		var o k8sObject
		if err := dec.Decode(&o); err != nil {
			break
		}
		switch o.Kind {
		case "Service":
			svc = &o
		case "StatefulSet":
			sts = &o
		}
	}
	if svc == nil || sts == nil {
		t.Fatal("want a Service and a StatefulSet")
	}
	if svc.Spec.ClusterIP != "None" || sts.Spec.ServiceName != svc.Metadata.Name {
		t.Errorf("the Service must be headless and the StatefulSet's serviceName: %q %q", svc.Spec.ClusterIP, sts.Spec.ServiceName)
	}
	if sts.Spec.UpdateStrategy.Type != "RollingUpdate" || sts.Spec.Template.Spec.TerminationGracePeriodSeconds < 30 {
		t.Errorf("update strategy %q, grace %d s", sts.Spec.UpdateStrategy.Type, sts.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}
	c := sts.Spec.Template.Spec.Containers[0]
	podFromAPI := false
	for _, e := range c.Env {
		if e.Name == "POD_NAME" {
			podFromAPI = e.ValueFrom.FieldRef.FieldPath == "metadata.name"
			t.Setenv("POD_NAME", "wordcount-1")
			continue
		}
		t.Setenv(e.Name, e.Value)
	}
	if !podFromAPI {
		t.Error("POD_NAME must come from the downward API (metadata.name)")
	}
	cfg, err := stoatflow.LoadConfig("")
	if err != nil {
		t.Fatalf("the StatefulSet's environment is refused: %v", err)
	}
	if cfg.HA.Mode != "active-standby" || cfg.HA.PodID != "wordcount-1" || cfg.HA.DesiredStandbys != sts.Spec.Replicas-1 {
		t.Errorf("ha: %+v with %d replicas", cfg.HA, sts.Spec.Replicas)
	}
	if len(c.Ports) == 0 || c.Ports[0].ContainerPort != cfg.HTTP.Port || c.ReadinessProbe.HTTPGet.Port != c.Ports[0].Name || c.LivenessProbe.HTTPGet.Port != c.Ports[0].Name {
		t.Errorf("probes and port do not match http.port %d", cfg.HTTP.Port)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/health/ready" || c.LivenessProbe.HTTPGet.Path != "/health/live" {
		t.Errorf("probe paths %q %q", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range sts.Spec.VolumeClaimTemplates {
			mounted = mounted || (m.Name == v.Metadata.Name && m.MountPath == cfg.State.Dir)
		}
	}
	if !mounted {
		t.Errorf("state.dir %s is not on a volume claim template", cfg.State.Dir)
	}
}

// TestDeploySystemd: the unit's environment, with the shared file, is a
// configuration StoatFlow accepts, and SIGTERM is what stops it.
func TestDeploySystemd(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "systemd")
	env, err := os.ReadFile(filepath.Join(dir, "wordcount.env"))
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(filepath.Join(dir, "stoatflow-wordcount@.service"))
	if err != nil {
		t.Fatal(err)
	}
	set := func(line string) {
		k, v, ok := strings.Cut(line, "=")
		if ok {
			t.Setenv(k, strings.ReplaceAll(v, "%i", "pod-2"))
		}
	}
	sc := bufio.NewScanner(strings.NewReader(string(env)))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			set(l)
		}
	}
	keys := map[string]string{}
	sc = bufio.NewScanner(strings.NewReader(string(unit)))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			keys[k] = v
			if k == "Environment" {
				set(v)
			}
		}
	}
	cfg, err := stoatflow.LoadConfig("")
	if err != nil {
		t.Fatalf("the unit's environment is refused: %v", err)
	}
	if cfg.HA.PodID != "pod-2" || cfg.State.Dir != "/var/lib/stoatflow/pod-2" || cfg.HA.Mode != "active-standby" {
		t.Errorf("config: %+v %+v", cfg.HA, cfg.State)
	}
	if keys["KillSignal"] != "SIGTERM" || keys["StateDirectory"] != "stoatflow/%i" {
		t.Errorf("unit: KillSignal %q StateDirectory %q", keys["KillSignal"], keys["StateDirectory"])
	}
	if s, _ := strconv.Atoi(keys["TimeoutStopSec"]); s < 30 {
		t.Errorf("TimeoutStopSec %q leaves no time for the handoff", keys["TimeoutStopSec"])
	}
}
