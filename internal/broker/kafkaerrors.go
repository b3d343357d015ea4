package broker

import "github.com/twmb/franz-go/pkg/kerr"

// Kafka error codes the broker answers with, all of them, in one place
// (the group coordinator's own answers are internal/groupcoord's).
// The numbers come from kerr, so a name cannot drift from the code Kafka
// gives it; each is an int16, the type of every ErrorCode field in kmsg.
var (
	// Produce, fetch and offsets.
	errOffsetOutOfRange        = kerr.OffsetOutOfRange.Code
	errCorruptMessage          = kerr.CorruptMessage.Code
	errUnknownTopicOrPartition = kerr.UnknownTopicOrPartition.Code
	errLeaderNotAvailable      = kerr.LeaderNotAvailable.Code
	errRequestTimedOut         = kerr.RequestTimedOut.Code
	errMessageTooLarge         = kerr.MessageTooLarge.Code
	errRecordListTooLarge      = kerr.RecordListTooLarge.Code
	errInvalidRequiredAcks     = kerr.InvalidRequiredAcks.Code
	errUnsupportedForMsgFormat = kerr.UnsupportedForMessageFormat.Code
	errKafkaStorageError       = kerr.KafkaStorageError.Code
	errFencedLeaderEpoch       = kerr.FencedLeaderEpoch.Code
	errUnknownLeaderEpoch      = kerr.UnknownLeaderEpoch.Code
	errInvalidRecord           = kerr.InvalidRecord.Code
	errUnknownTopicID          = kerr.UnknownTopicID.Code
	errFetchSessionIDNotFound  = kerr.FetchSessionIDNotFound.Code
	// errOffsetNotAvailable answers ListOffsets for "latest" on a new
	// leader whose high watermark is still below its log end as of the
	// promotion.
	errOffsetNotAvailable = kerr.OffsetNotAvailable.Code

	// min.insync.replicas.

	// errNotEnoughReplicas refuses an acks=all produce before it is
	// appended: the partition's ISR is smaller than its topic's
	// min.insync.replicas.
	errNotEnoughReplicas = kerr.NotEnoughReplicas.Code
	// errNotEnoughReplicasAfterAppend answers a produce that was
	// appended but whose partition's ISR then fell below
	// min.insync.replicas: its high watermark does not advance until the
	// ISR grows again, so waiting longer is pointless. Like a timeout, an
	// unknown outcome: the records may still be committed later.
	errNotEnoughReplicasAfterAppend = kerr.NotEnoughReplicasAfterAppend.Code

	// Admin requests.
	errInvalidTopicException  = kerr.InvalidTopicException.Code
	errTopicAlreadyExists     = kerr.TopicAlreadyExists.Code
	errInvalidPartitions      = kerr.InvalidPartitions.Code
	errInvalidReplicationFact = kerr.InvalidReplicationFactor.Code
	errInvalidReplicaAssign   = kerr.InvalidReplicaAssignment.Code
	errInvalidConfig          = kerr.InvalidConfig.Code
	errInvalidRequest         = kerr.InvalidRequest.Code

	// A static-mode follower (Kafka's NOT_LEADER_OR_FOLLOWER is the code
	// kerr still calls NotLeaderForPartition).
	errNotLeaderOrFollower     = kerr.NotLeaderForPartition.Code
	errConcurrentTransactions  = kerr.ConcurrentTransactions.Code
	errCoordinatorLoadProgress = kerr.CoordinatorLoadInProgress.Code
	errNotController           = kerr.NotController.Code

	// Groups and offset commits.
	errCoordinatorNotAvailable = kerr.CoordinatorNotAvailable.Code
	errNotCoordinator          = kerr.NotCoordinator.Code
	errInvalidGroupID          = kerr.InvalidGroupID.Code
	errNonEmptyGroup           = kerr.NonEmptyGroup.Code

	// Transactions.
	errOperationNotAttempted        = kerr.OperationNotAttempted.Code
	errTransactionCoordinatorFenced = kerr.TransactionCoordinatorFenced.Code

	// Authorization.
	errTopicAuthorizationFailed   = kerr.TopicAuthorizationFailed.Code
	errGroupAuthorizationFailed   = kerr.GroupAuthorizationFailed.Code
	errClusterAuthorizationFailed = kerr.ClusterAuthorizationFailed.Code
	errTxnIDAuthorizationFailed   = kerr.TransactionalIDAuthorizationFailed.Code

	// Logins.
	errUnsupportedSaslMechanism = kerr.UnsupportedSaslMechanism.Code
	errIllegalSaslState         = kerr.IllegalSaslState.Code
	errSaslAuthenticationFailed = kerr.SaslAuthenticationFailed.Code

	// Credential APIs.
	errResourceNotFound       = kerr.ResourceNotFound.Code
	errDuplicateResource      = kerr.DuplicateResource.Code
	errUnacceptableCredential = kerr.UnacceptableCredential.Code
)
