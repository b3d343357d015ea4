package group

// Kafka error codes returned by the coordinator.
const (
	errNone                      int16 = 0
	errNotCoordinator            int16 = 16
	errIllegalGeneration         int16 = 22
	errInconsistentGroupProtocol int16 = 23
	errInvalidGroupID            int16 = 24
	errUnknownMemberID           int16 = 25
	errInvalidSessionTimeout     int16 = 26
	errRebalanceInProgress       int16 = 27
	errNonEmptyGroup             int16 = 68
	errGroupIDNotFound           int16 = 69
	errMemberIDRequired          int16 = 79
	errGroupMaxSizeReached       int16 = 81
	errFencedInstanceID          int16 = 82
)
