package stoatflow

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

type fkOrder struct {
	ID         string `json:"id"`
	CustomerID string `json:"customerId"`
	Amount     int    `json:"amount"`
}

type fkCustomer struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// TestForeignKeyJoin joins orders (three partitions) with their customers
// (two partitions) through the subscription and response topics, inner and
// left, over three rounds of input, and compares the joined tables with
// the join of the final input tables after each: first inserts (some
// orders name customers that do not exist), then a random mix of updates,
// foreign-key changes and deletes on both sides, then the deletion of
// every customer.
func TestForeignKeyJoin(t *testing.T) {
	bs := sharedMoonMQ(t)
	orders, customers, inner, left := unique(t, "orders"), unique(t, "customers"), unique(t, "inner"), unique(t, "left")
	createTopics(t, bs, 3, orders, inner, left)
	createTopics(t, bs, 2, customers)

	topo := NewTopology()
	ot := TableFrom(topo, orders, "orders", String, JSON[fkOrder]())
	ct := TableFrom(topo, customers, "customers", String, JSON[fkCustomer]())
	fk := func(o fkOrder) string { return o.CustomerID }
	JoinForeignKey(ot, ct, fk, func(o fkOrder, c fkCustomer) string {
		return fmt.Sprintf("%s:%s:%d", o.ID, c.Name, o.Amount)
	}, "enriched", String).ToStream().To(inner, String, String)
	LeftJoinForeignKey(ot, ct, fk, func(o fkOrder, c fkCustomer, ok bool) string {
		if !ok {
			return fmt.Sprintf("%s:-:%d", o.ID, o.Amount)
		}
		return fmt.Sprintf("%s:%s:%d", o.ID, c.Name, o.Amount)
	}, "enriched-left", String).ToStream().To(left, String, String)

	appID := unique(t, "app")
	app := startApp(t, testConfig(t, bs, appID), topo)
	o := readOutputs(t, bs, inner, left)
	cl := testClient(t, bs)

	orderState, customerState := map[string]fkOrder{}, map[string]fkCustomer{}
	var batch []in
	putOrder := func(id, cust string, amount int) {
		b, _ := json.Marshal(fkOrder{ID: id, CustomerID: cust, Amount: amount})
		batch = append(batch, in{topic: orders, key: id, value: sp(string(b)), partition: keyPartition([]byte(id), 3)})
		orderState[id] = fkOrder{ID: id, CustomerID: cust, Amount: amount}
	}
	deleteOrder := func(id string) {
		batch = append(batch, in{topic: orders, key: id, partition: keyPartition([]byte(id), 3)})
		delete(orderState, id)
	}
	putCustomer := func(id, name string) {
		b, _ := json.Marshal(fkCustomer{ID: id, Name: name})
		batch = append(batch, in{topic: customers, key: id, value: sp(string(b)), partition: keyPartition([]byte(id), 2)})
		customerState[id] = fkCustomer{ID: id, Name: name}
	}
	deleteCustomer := func(id string) {
		batch = append(batch, in{topic: customers, key: id, partition: keyPartition([]byte(id), 2)})
		delete(customerState, id)
	}
	round := func(name string) {
		t.Helper()
		produce(t, cl, batch)
		batch = nil
		wantInner, wantLeft := map[string]string{}, map[string]string{}
		for id, ord := range orderState {
			if c, ok := customerState[ord.CustomerID]; ok {
				wantInner[id] = fmt.Sprintf("%s:%s:%d", id, c.Name, ord.Amount)
				wantLeft[id] = wantInner[id]
			} else {
				wantLeft[id] = fmt.Sprintf("%s:-:%d", id, ord.Amount)
			}
		}
		t.Logf("%s: %d orders, %d customers, %d joined", name, len(orderState), len(customerState), len(wantInner))
		o.await(t, awaitWithin, settle,
			expectation{inner, func(got []out) error { return sameFinal(decodeAll(got, plainText, plainText), wantInner) }},
			expectation{left, func(got []out) error { return sameFinal(decodeAll(got, plainText, plainText), wantLeft) }},
		)
		for id := range orderState {
			eventually(t, 10*time.Second, func() error {
				v, ok, err := QueryKeyValue[string, string](app.App, "enriched", id)
				if w, joined := wantInner[id]; err != nil || ok != joined || v != w {
					return fmt.Errorf("%s: QueryKeyValue(enriched, %s) = %q, %v, %v; want %q, %v", name, id, v, ok, err, w, joined)
				}
				return nil
			})
		}
	}

	rng := rand.New(rand.NewPCG(8, 8))
	for i := range 6 {
		putCustomer(fmt.Sprintf("c%d", i), fmt.Sprintf("name%d", i))
	}
	for i := range 30 {
		putOrder(fmt.Sprintf("o%d", i), fmt.Sprintf("c%d", rng.IntN(8)), rng.IntN(100)) // c6, c7: none yet
	}
	round("inserts")

	for range 80 {
		switch x := rng.IntN(100); {
		case x < 40: // a new foreign key, or a new order
			putOrder(fmt.Sprintf("o%d", rng.IntN(36)), fmt.Sprintf("c%d", rng.IntN(8)), rng.IntN(100))
		case x < 55: // the same foreign key, another amount
			id := fmt.Sprintf("o%d", rng.IntN(30))
			if ord, ok := orderState[id]; ok {
				putOrder(id, ord.CustomerID, ord.Amount+1)
			}
		case x < 70:
			deleteOrder(fmt.Sprintf("o%d", rng.IntN(36)))
		case x < 88:
			putCustomer(fmt.Sprintf("c%d", rng.IntN(8)), fmt.Sprintf("name%d", rng.IntN(1000)))
		default:
			deleteCustomer(fmt.Sprintf("c%d", rng.IntN(8)))
		}
	}
	round("updates and deletes")

	for i := range 8 {
		deleteCustomer(fmt.Sprintf("c%d", i))
	}
	round("every customer deleted")

	// The internal topics are sized like the side that reads them.
	adm := kadm.NewClient(testClient(t, bs))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := adm.ListTopics(ctx, appID+"-enriched-subscription-registration", appID+"-enriched-subscription-response")
	if err != nil {
		t.Fatal(err)
	}
	for topic, want := range map[string]int{appID + "-enriched-subscription-registration": 2, appID + "-enriched-subscription-response": 3} {
		if got := len(md[topic].Partitions); got != want {
			t.Errorf("%s has %d partitions, want %d", topic, got, want)
		}
	}
}
