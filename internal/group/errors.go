package group

import "github.com/twmb/franz-go/pkg/kerr"

// errNone is Kafka's NONE, the code of a success: kerr has no error for it.
const errNone int16 = 0

// Kafka error codes returned by the coordinator. The numbers come from kerr;
// each is an int16, the type of every ErrorCode field in kmsg.
var (
	errNotCoordinator            = kerr.NotCoordinator.Code
	errIllegalGeneration         = kerr.IllegalGeneration.Code
	errInconsistentGroupProtocol = kerr.InconsistentGroupProtocol.Code
	errInvalidGroupID            = kerr.InvalidGroupID.Code
	errUnknownMemberID           = kerr.UnknownMemberID.Code
	errInvalidSessionTimeout     = kerr.InvalidSessionTimeout.Code
	errRebalanceInProgress       = kerr.RebalanceInProgress.Code
	errNonEmptyGroup             = kerr.NonEmptyGroup.Code
	errGroupIDNotFound           = kerr.GroupIDNotFound.Code
	errMemberIDRequired          = kerr.MemberIDRequired.Code
	errGroupMaxSizeReached       = kerr.GroupMaxSizeReached.Code
	errFencedInstanceID          = kerr.FencedInstanceID.Code

	// Used only by consumer-protocol groups (KIP-848).
	errUnsupportedVersion       = kerr.UnsupportedVersion.Code
	errInvalidRequest           = kerr.InvalidRequest.Code
	errFencedMemberEpoch        = kerr.FencedMemberEpoch.Code
	errUnreleasedInstanceID     = kerr.UnreleasedInstanceID.Code
	errUnsupportedAssignor      = kerr.UnsupportedAssignor.Code
	errStaleMemberEpoch         = kerr.StaleMemberEpoch.Code
	errInvalidRegularExpression = kerr.InvalidRegularExpression.Code
)
