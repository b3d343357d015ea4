package broker

// aclsTopic is the internal, compacted topic that holds the ACLs, one
// record per binding (auth.ACLRecord).
const aclsTopic = "__moonmq_acls"

// refreshACLs brings the ACLs up to date with __moonmq_acls.
func (b *Broker) refreshACLs() {
	if err := b.sec.aclLog.catchUp(); err != nil {
		b.log.Error("cannot read the ACLs; authorization uses what was read before", "err", err)
	}
}
