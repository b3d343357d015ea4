// Command fkjoin enriches orders with their customer's name through a
// foreign-key join: "orders" is keyed by order id with JSON values
// {"id", "customerId", "amount"}, "customers" is keyed by customer id with
// JSON values {"id", "name"}, and "orders-enriched" gets, per order id, the
// order with its customer's name as JSON (a tombstone when the order is
// deleted, or its customer is deleted or missing). The two input topics
// need not have the same number of partitions.
//
//	STOATFLOW__APPLICATION_ID=fkjoin STOATFLOW__BOOTSTRAP_SERVERS=127.0.0.1:9092 go run ./examples/fkjoin
//	curl localhost:8080/state/orders-enriched/o-1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/moonmq/moonmq/stoatflow"
)

func main() {
	config := flag.String("config", "", "YAML file with a stoatflow: block (environment variables STOATFLOW__* override it)")
	orderPartitions := flag.Int("order-partitions", 3, "partitions of orders and orders-enriched when this creates them")
	customerPartitions := flag.Int("customer-partitions", 2, "partitions of customers when this creates it")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(*config, *orderPartitions, *customerPartitions, log); err != nil {
		log.Error("fkjoin stopped", "err", err)
		if errors.Is(err, stoatflow.ErrFenced) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

// Order is a value of "orders".
type Order struct {
	ID         string  `json:"id"`
	CustomerID string  `json:"customerId"`
	Amount     float64 `json:"amount"`
}

// Customer is a value of "customers".
type Customer struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// EnrichedOrder is a value of "orders-enriched".
type EnrichedOrder struct {
	OrderID      string  `json:"orderId"`
	CustomerID   string  `json:"customerId"`
	CustomerName string  `json:"customerName"`
	Amount       float64 `json:"amount"`
}

// Topology joins each order with the customer its customerId names.
func Topology() *stoatflow.Topology {
	t := stoatflow.NewTopology()
	orders := stoatflow.TableFrom(t, "orders", "orders", stoatflow.String, stoatflow.JSON[Order]())
	customers := stoatflow.TableFrom(t, "customers", "customers", stoatflow.String, stoatflow.JSON[Customer]())
	enriched := stoatflow.JoinForeignKey(orders, customers,
		func(o Order) string { return o.CustomerID },
		func(o Order, c Customer) EnrichedOrder {
			return EnrichedOrder{OrderID: o.ID, CustomerID: o.CustomerID, CustomerName: c.Name, Amount: o.Amount}
		},
		"orders-enriched", stoatflow.JSON[EnrichedOrder]())
	enriched.ToStream().To("orders-enriched", stoatflow.String, stoatflow.JSON[EnrichedOrder]())
	return t
}

func run(config string, orderPartitions, customerPartitions int, log *slog.Logger) error {
	cfg, err := stoatflow.LoadConfig(config)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = stoatflow.CreateTopics(cctx, cfg, orderPartitions, "orders", "orders-enriched")
	if err == nil {
		err = stoatflow.CreateTopics(cctx, cfg, customerPartitions, "customers")
	}
	cancel()
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	app, err := stoatflow.New(cfg, Topology(), stoatflow.WithLogger(log))
	if err != nil {
		return err
	}
	return app.Run(ctx)
}
