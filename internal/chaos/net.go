package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// Net is the set of proxies of one replication group: one per directed
// replication link (replica From's view of replica To's replication
// port) and one per replica's client port, which every Kafka client and
// every replica's Metadata answers name.
type Net struct {
	ids     []int
	proxies map[testcluster.Link]*Proxy
}

// NewNet opens the proxies of a group with replica ids 1..n.
func NewNet(n int) (*Net, error) {
	nt := &Net{proxies: map[testcluster.Link]*Proxy{}}
	for id := 1; id <= n; id++ {
		nt.ids = append(nt.ids, id)
	}
	add := func(l testcluster.Link) error {
		p, err := NewProxy(linkName(l))
		if err != nil {
			nt.Close()
			return err
		}
		nt.proxies[l] = p
		return nil
	}
	for _, to := range nt.ids {
		if err := add(testcluster.Link{Kind: testcluster.ClientLink, To: to}); err != nil {
			return nil, err
		}
		for _, from := range nt.ids {
			if from != to {
				if err := add(testcluster.Link{Kind: testcluster.ReplicationLink, From: from, To: to}); err != nil {
					return nil, err
				}
			}
		}
	}
	return nt, nil
}

func linkName(l testcluster.Link) string {
	if l.Kind == testcluster.ClientLink {
		return fmt.Sprintf("clients->%d", l.To)
	}
	return fmt.Sprintf("%d->%d", l.From, l.To)
}

// Mapper is the testcluster.WithAddressMapper function that routes every
// link through its proxy.
func (n *Net) Mapper() func(testcluster.Link) string {
	return func(l testcluster.Link) string {
		if l.Kind == testcluster.ClientLink {
			l.From = 0
		}
		if p := n.proxies[l]; p != nil {
			return p.Addr()
		}
		return ""
	}
}

// Attach points every proxy at the real port of its replica.
func (n *Net) Attach(c *testcluster.Cluster) {
	for l, p := range n.proxies {
		r := c.Replica(l.To)
		if l.Kind == testcluster.ClientLink {
			p.SetTarget(r.ClientAddr())
		} else {
			p.SetTarget(r.ReplicateAddr())
		}
	}
}

// ClientAddrs are the proxied client addresses of every replica, to seed
// Kafka clients with.
func (n *Net) ClientAddrs() []string {
	var out []string
	for _, id := range n.ids {
		out = append(out, n.Client(id).Addr())
	}
	return out
}

// Repl is the proxy of replica from's link to replica to's replication
// port.
func (n *Net) Repl(from, to int) *Proxy {
	return n.proxies[testcluster.Link{Kind: testcluster.ReplicationLink, From: from, To: to}]
}

// Client is the proxy in front of replica to's client port.
func (n *Net) Client(to int) *Proxy {
	return n.proxies[testcluster.Link{Kind: testcluster.ClientLink, To: to}]
}

// replLinks returns the replication proxies touching id (both ways).
func (n *Net) replLinks(id int) []*Proxy {
	var out []*Proxy
	for _, o := range n.ids {
		if o != id {
			out = append(out, n.Repl(id, o), n.Repl(o, id))
		}
	}
	return out
}

// Isolate blackholes every replication link of id, both ways, and leaves
// its client link alone: clients still reach it, its peers do not.
func (n *Net) Isolate(id int) {
	for _, p := range n.replLinks(id) {
		p.Blackhole(true, true)
	}
}

// Partition blackholes every replication link between replicas on
// different sides, both ways; replicas on no side are left alone.
func (n *Net) Partition(sides ...[]int) {
	side := map[int]int{}
	for i, s := range sides {
		for _, id := range s {
			side[id] = i + 1
		}
	}
	for _, a := range n.ids {
		for _, b := range n.ids {
			if a != b && side[a] != 0 && side[b] != 0 && side[a] != side[b] {
				n.Repl(a, b).Blackhole(true, true)
			}
		}
	}
}

// Cut blackholes replica from's link to replica to only: from cannot reach
// to, while to still reaches from.
func (n *Net) Cut(from, to int) { n.Repl(from, to).Blackhole(true, true) }

// Delay adds d to every replication link of id, both ways.
func (n *Net) Delay(id int, d time.Duration) {
	for _, p := range n.replLinks(id) {
		p.SetDelay(d)
	}
}

// DropConns closes every open connection of id's links (replication and
// client); with reset the peers get RSTs.
func (n *Net) DropConns(id int, reset bool) {
	links := append(n.replLinks(id), n.Client(id))
	for _, p := range links {
		if reset {
			p.Reset()
		} else {
			p.Drop()
		}
	}
}

// Heal removes every hold and delay; with reset it first ends every open
// connection with an RST (the partition outlived TCP's patience), else the
// held bytes flow on.
func (n *Net) Heal(reset bool) {
	for _, p := range n.proxies {
		if reset {
			p.Reset()
		}
		p.Pass()
	}
}

// Describe lists the links that are not passing, for the timeline.
func (n *Net) Describe() string {
	var out []string
	for _, p := range n.proxies {
		if st := p.State(); st != "pass" {
			out = append(out, p.Name()+" "+st)
		}
	}
	sort.Strings(out)
	return strings.Join(slices.Compact(out), ", ")
}

// Close closes every proxy.
func (n *Net) Close() {
	for _, p := range n.proxies {
		p.Close()
	}
}
