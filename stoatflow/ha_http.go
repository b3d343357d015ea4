package stoatflow

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/moonmq/moonmq/stoatflow/internal/ha"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// readiness is what /health/ready answers. Without high availability:
// ready once restored. A standby is ready once caught up, and, when more
// than one standby is wanted, only if rolling it would still leave the
// active and another caught-up standby (the redundancy floor).
func (a *App) readiness() (bool, string) {
	h := a.ha.Load()
	if h == nil {
		if a.ready.Load() {
			return true, ""
		}
		return false, "restoring"
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.node
	if n.Role() == ha.RoleActive {
		if a.ready.Load() && n.State() == ha.StateActive {
			return true, ""
		}
		return false, "promoting"
	}
	if n.State() != ha.StateReadyStandby {
		return false, "catching up"
	}
	if a.cfg.HA.DesiredStandbys > 1 {
		others := n.ReadyStandbys(now) - 1
		if !n.ActiveLive(now) || others < 1 {
			return false, fmt.Sprintf("redundancy floor: rolling this pod would leave %d other caught-up standbys and an active=%v", others, n.ActiveLive(now))
		}
	}
	return true, ""
}

func (a *App) haPeers() int {
	h := a.ha.Load()
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	c := 0
	now := time.Now()
	for _, p := range h.node.Peers(now) {
		if p.Live {
			c++
		}
	}
	return c
}

func (a *App) haBelowDesired() bool {
	h := a.ha.Load()
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.node.ReadyStandbys(time.Now()) < a.cfg.HA.DesiredStandbys
}

// haStatus is GET /ha/status. The field names are a contract: the HA
// tests and habench decode them by name.
func (a *App) haStatus() map[string]any {
	h := a.ha.Load()
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.node
	epoch, holder := n.Token()
	hb := n.Heartbeat(h.gen)
	fresh := now.Sub(h.lastCurrent).Milliseconds()
	if h.lastCurrent.IsZero() {
		fresh = -1
	}
	ready := n.ReadyStandbys(now)
	var restart any
	if why := a.restartRequired.Load(); why != nil {
		restart = *why
	}
	return map[string]any{
		"selfPodId":              h.cfg.Pod,
		"selfRole":               n.Role(),
		"selfState":              n.State(),
		"replicationLagRecords":  hb.LagRecords,
		"replicationLagMs":       hb.LagMs,
		"tailFreshnessMs":        fresh,
		"tailCaughtUp":           n.CaughtUp(),
		"restartRequired":        restart,
		"readyStandbyCount":      ready,
		"desiredStandbys":        a.cfg.HA.DesiredStandbys,
		"redundancyBelowDesired": ready < a.cfg.HA.DesiredStandbys,
		"tokenEpoch":             epoch,
		"tokenHolder":            holder,
		"peers":                  n.Peers(now),
	}
}

func (a *App) registerHA(mux *http.ServeMux) {
	mux.HandleFunc("GET /ha/status", func(w http.ResponseWriter, r *http.Request) {
		if a.ha.Load() == nil {
			httpError(w, http.StatusServiceUnavailable, fmt.Errorf("starting"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a.haStatus())
	})
	cmd := func(name string, needPod bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			h := a.ha.Load()
			if h == nil {
				httpError(w, http.StatusServiceUnavailable, fmt.Errorf("starting"))
				return
			}
			target := r.URL.Query().Get("pod")
			if needPod && target == "" {
				httpError(w, http.StatusBadRequest, fmt.Errorf("%s needs ?pod=<id>", name))
				return
			}
			force, _ := strconv.ParseBool(r.URL.Query().Get("force"))
			if !force {
				if err := a.handoffTarget(name, target); err != nil {
					httpError(w, http.StatusConflict, err)
					return
				}
			}
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			c := &ha.Command{Command: name, Target: target, Force: force}
			off, err := h.command(ctx, c)
			if err != nil {
				httpError(w, http.StatusServiceUnavailable, fmt.Errorf("publish the command: %w", err))
				return
			}
			var tgt any
			if target != "" {
				tgt = target
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			json.NewEncoder(w).Encode(map[string]any{"command": name, "target": tgt, "force": force, "commandOffset": off})
		}
	}
	mux.HandleFunc("POST /ha/switch", cmd(ha.CmdSwitch, false))
	mux.HandleFunc("POST /ha/promote", cmd(ha.CmdPromote, true))
	mux.HandleFunc("POST /ha/demote", cmd(ha.CmdDemote, true))
}

// handoffTarget refuses a command that has no caught-up standby to hand
// over to: a self-inflicted outage.
func (a *App) handoffTarget(name, target string) error {
	h := a.ha.Load()
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	peers := h.node.Peers(now)
	self := h.node.Heartbeat(h.gen)
	self.State = h.node.State()
	all := append([]ha.PeerView{{Heartbeat: *self, Live: true}}, peers...)
	for _, p := range all {
		if !p.Live {
			continue
		}
		if p.Role != ha.RoleStandby || p.State != ha.StateReadyStandby {
			continue
		}
		if name == ha.CmdPromote && p.Pod != target {
			continue
		}
		if name == ha.CmdDemote && p.Pod == target {
			continue
		}
		return nil
	}
	if name == ha.CmdPromote {
		return fmt.Errorf("pod %s is not a caught-up standby (READY_STANDBY); add ?force=true to promote it anyway (it still restores fully before processing)", target)
	}
	return fmt.Errorf("no caught-up standby (READY_STANDBY) to hand over to; add ?force=true to hand over anyway")
}
