package broker

import "testing"

func TestNoQuotasBlock(t *testing.T) {
	if newQuotas(nil) != nil {
		t.Fatal("no Quotas block made quotas")
	}
}
