package chaos

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/moonmq/moonmq/internal/testcluster"
)

// Net is the set of proxies of a run: one per directed replication link
// (replica From's view of replica To's replication port) and one per
// replica's client port, which every Kafka client and every replica's
// Metadata answers name. In a cluster of groups, the replication links
// are those inside each group and those to the metadata log's voters
// (which share the replication port), and each replica has one more
// proxy, in front of the replication address it registers for the other
// groups' calls (transaction markers, offset commits of transactions).
type Net struct {
	ids     []int
	proxies map[testcluster.Link]*Proxy
}

// NewNet opens the proxies of a group with replica ids 1..n.
func NewNet(n int) (*Net, error) {
	var ids []int
	for id := 1; id <= n; id++ {
		ids = append(ids, id)
	}
	return NewClusterNet([][]int{ids}, nil)
}

// NewClusterNet opens the proxies of groups (each a list of replica ids)
// and of every replica's links to the voters.
func NewClusterNet(groups [][]int, voters []int) (*Net, error) {
	nt := &Net{proxies: map[testcluster.Link]*Proxy{}}
	add := func(l testcluster.Link) error {
		if nt.proxies[l] != nil {
			return nil
		}
		p, err := NewProxy(linkName(l))
		if err != nil {
			nt.Close()
			return err
		}
		nt.proxies[l] = p
		return nil
	}
	for _, g := range groups {
		nt.ids = append(nt.ids, g...)
	}
	for _, g := range groups {
		for _, to := range g {
			if err := add(testcluster.Link{Kind: testcluster.ClientLink, To: to}); err != nil {
				return nil, err
			}
			for _, from := range g {
				if from != to {
					if err := add(testcluster.Link{Kind: testcluster.ReplicationLink, From: from, To: to}); err != nil {
						return nil, err
					}
				}
			}
		}
	}
	if len(groups) > 1 {
		for _, to := range nt.ids {
			if err := add(testcluster.Link{Kind: testcluster.GroupLink, To: to}); err != nil {
				return nil, err
			}
		}
	}
	for _, from := range nt.ids {
		for _, to := range voters {
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
	switch l.Kind {
	case testcluster.ClientLink:
		return fmt.Sprintf("clients->%d", l.To)
	case testcluster.GroupLink:
		return fmt.Sprintf("groups->%d", l.To)
	}
	return fmt.Sprintf("%d->%d", l.From, l.To)
}

// Mapper is the testcluster.WithAddressMapper function that routes every
// link through its proxy.
func (n *Net) Mapper() func(testcluster.Link) string {
	return func(l testcluster.Link) string {
		if l.Kind != testcluster.ReplicationLink {
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
	for l, p := range n.proxies {
		if l.Kind == testcluster.ReplicationLink && (l.From == id || l.To == id) {
			out = append(out, p)
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
	for l, p := range n.proxies {
		if l.Kind == testcluster.ReplicationLink && side[l.From] != 0 && side[l.To] != 0 && side[l.From] != side[l.To] {
			p.Blackhole(true, true)
		}
	}
}

// CutGroupLinks blackholes, both ways, the proxies in front of the
// replication addresses the replicas ids registered: other groups'
// brokers cannot reach them (connections already open hold their bytes).
func (n *Net) CutGroupLinks(ids []int) {
	for _, id := range ids {
		if p := n.proxies[testcluster.Link{Kind: testcluster.GroupLink, To: id}]; p != nil {
			p.Blackhole(true, true)
		}
	}
}

// Cut blackholes replica from's link to replica to only: from cannot reach
// to, while to still reaches from. A link that has no proxy (two groups'
// brokers, neither a voter) is not cut.
func (n *Net) Cut(from, to int) {
	if p := n.Repl(from, to); p != nil {
		p.Blackhole(true, true)
	}
}

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
