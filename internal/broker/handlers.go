package broker

// Kafka error codes the broker answers with.
const (
	errOffsetOutOfRange        int16 = 1
	errCorruptMessage          int16 = 2
	errUnknownTopicOrPartition int16 = 3
	errMessageTooLarge         int16 = 10
	errLeaderNotAvailable      int16 = 5
	errRequestTimedOut         int16 = 7
	errInvalidRequiredAcks     int16 = 21
	errInvalidTopicException   int16 = 17
	errRecordListTooLarge      int16 = 18
	errTopicAlreadyExists      int16 = 36
	errInvalidPartitions       int16 = 37
	errInvalidReplicationFact  int16 = 38
	errInvalidRequest          int16 = 42
	errInvalidConfig           int16 = 40
	errUnsupportedForMsgFormat int16 = 43
	errKafkaStorageError       int16 = 56
	errUnknownLeaderEpoch      int16 = 76
	errFencedLeaderEpoch       int16 = 74
	errInvalidRecord           int16 = 87
	errUnknownTopicID          int16 = 100
	errInvalidReplicaAssign    int16 = 39
)
