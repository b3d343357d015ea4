package broker

import "github.com/moonmq/moonmq/internal/protocol"

// versions is what ApiVersions advertises and what the server accepts.
//
// Minimums reach as low as clients probe, because librdkafka enables a
// feature only when an exact old version is inside the range (record format
// v2 needs Produce 3 and Fetch 4). Maximums stop before versions whose
// semantics the broker does not implement yet (Produce 13 and Fetch 17+
// need features we lack).
var versions = protocol.Table{
	0:  {Min: 0, Max: 12}, // Produce; v0-2 carry message format v0/v1 and are refused per partition; v12 adds partitions to transactions implicitly
	1:  {Min: 4, Max: 16}, // Fetch
	2:  {Min: 0, Max: 8},  // ListOffsets
	3:  {Min: 0, Max: 12}, // Metadata
	18: {Min: 0, Max: 4},  // ApiVersions
	19: {Min: 0, Max: 7},  // CreateTopics
	20: {Min: 0, Max: 6},  // DeleteTopics
	21: {Min: 0, Max: 2},  // DeleteRecords
	23: {Min: 0, Max: 4},  // OffsetForLeaderEpoch
	32: {Min: 0, Max: 4},  // DescribeConfigs
	33: {Min: 0, Max: 2},  // AlterConfigs
	37: {Min: 0, Max: 3},  // CreatePartitions
	44: {Min: 0, Max: 1},  // IncrementalAlterConfigs
	60: {Min: 0, Max: 1},  // DescribeCluster
	35: {Min: 0, Max: 4},  // DescribeLogDirs (one directory: <DataDir>/topics)
	22: {Min: 0, Max: 4},  // InitProducerId
	24: {Min: 0, Max: 3},  // AddPartitionsToTxn (v4+ is transactions v2, not served)
	25: {Min: 0, Max: 3},  // AddOffsetsToTxn
	26: {Min: 0, Max: 5},  // EndTxn (v5: transactions v2, epoch bump per transaction)
	28: {Min: 0, Max: 5},  // TxnOffsetCommit (v5: adds the group implicitly)
	61: {Min: 0, Max: 0},  // DescribeProducers
	65: {Min: 0, Max: 0},  // DescribeTransactions
	66: {Min: 0, Max: 1},  // ListTransactions
	10: {Min: 0, Max: 4},  // FindCoordinator (groups and transactions)
	8:  {Min: 0, Max: 9},  // OffsetCommit (v9: generation is a KIP-848 member epoch for consumer groups)
	9:  {Min: 0, Max: 9},  // OffsetFetch (v9: member id and epoch of a KIP-848 member)
	47: {Min: 0, Max: 0},  // OffsetDelete
	11: {Min: 0, Max: 9},  // JoinGroup
	14: {Min: 0, Max: 5},  // SyncGroup
	12: {Min: 0, Max: 4},  // Heartbeat
	13: {Min: 0, Max: 5},  // LeaveGroup
	15: {Min: 0, Max: 5},  // DescribeGroups
	16: {Min: 0, Max: 5},  // ListGroups
	42: {Min: 0, Max: 2},  // DeleteGroups
	68: {Min: 0, Max: 1},  // ConsumerGroupHeartbeat (KIP-848; v1: client-generated member ids, regex)
	69: {Min: 0, Max: 1},  // ConsumerGroupDescribe
	17: {Min: 0, Max: 1},  // SaslHandshake (v0: bare SASL tokens follow)
	36: {Min: 0, Max: 2},  // SaslAuthenticate
	50: {Min: 0, Max: 0},  // DescribeUserScramCredentials
	51: {Min: 0, Max: 0},  // AlterUserScramCredentials
	29: {Min: 0, Max: 3},  // DescribeAcls
	30: {Min: 0, Max: 3},  // CreateAcls
	31: {Min: 0, Max: 3},  // DeleteAcls
}
