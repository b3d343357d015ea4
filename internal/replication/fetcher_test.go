package replication

import "testing"

func TestFetcherLoop(t *testing.T) {
	type step struct {
		name string
		do   func(f *Fetcher) Action
		want Action
		st   FetchState
	}
	tp := TopicPartition{Topic: "t", Partition: 2}
	steps := []step{
		{"idle waits", func(f *Fetcher) Action { return f.ManifestApplied(1, "d1") }, Action{Kind: ActWait, Leader: -1, Epoch: -1}, StateIdle},
		{"new leader: manifest", func(f *Fetcher) Action { return f.NewLeader(1, 3) }, Action{Kind: ActFetchManifest, Leader: 1, Epoch: 3}, StateManifest},
		{"stale manifest ignored", func(f *Fetcher) Action { return f.ManifestApplied(2, "d0") }, Action{Kind: ActFetchManifest, Leader: 1, Epoch: 3}, StateManifest},
		{"manifest: truncate", func(f *Fetcher) Action { return f.ManifestApplied(3, "d1") }, Action{Kind: ActTruncate, Leader: 1, Epoch: 3}, StateTruncation},
		{"transient error retries with backoff", func(f *Fetcher) Action { return f.Failed(3, ErrTransient) }, Action{Kind: ActTruncate, Leader: 1, Epoch: 3, Backoff: true}, StateTruncation},
		{"truncation done: fetch", func(f *Fetcher) Action { return f.TruncationDone(3) }, Action{Kind: ActFetch, Leader: 1, Epoch: 3}, StateFetching},
		{"fetch again", func(f *Fetcher) Action { return f.FetchResult(3, "d1") }, Action{Kind: ActFetch, Leader: 1, Epoch: 3}, StateFetching},
		{"digest change: manifest", func(f *Fetcher) Action { return f.FetchResult(3, "d2") }, Action{Kind: ActFetchManifest, Leader: 1, Epoch: 3}, StateManifest},
		{"same epoch: no second truncation", func(f *Fetcher) Action { return f.ManifestApplied(3, "d2") }, Action{Kind: ActFetch, Leader: 1, Epoch: 3}, StateFetching},
		{"below leader start: reset", func(f *Fetcher) Action { return f.OffsetOutOfRange(3, tp, 5, 10, 20) }, Action{Kind: ActResetPartition, Leader: 1, Epoch: 3, Partition: tp, Offset: 10}, StateFetching},
		{"in range after all: fetch", func(f *Fetcher) Action { return f.OffsetOutOfRange(3, tp, 15, 10, 20) }, Action{Kind: ActFetch, Leader: 1, Epoch: 3}, StateFetching},
		{"above leader end: truncate again", func(f *Fetcher) Action { return f.OffsetOutOfRange(3, tp, 25, 10, 20) }, Action{Kind: ActTruncate, Leader: 1, Epoch: 3}, StateTruncation},
		{"truncation done again", func(f *Fetcher) Action { return f.TruncationDone(3) }, Action{Kind: ActFetch, Leader: 1, Epoch: 3}, StateFetching},
		{"unknown epoch: backoff", func(f *Fetcher) Action { return f.Failed(3, ErrUnknownLeaderEpoch) }, Action{Kind: ActFetch, Leader: 1, Epoch: 3, Backoff: true}, StateFetching},
		{"same leader again: no restart", func(f *Fetcher) Action { return f.NewLeader(1, 3) }, Action{Kind: ActFetch, Leader: 1, Epoch: 3}, StateFetching},
		{"older leader ignored", func(f *Fetcher) Action { return f.NewLeader(2, 2) }, Action{Kind: ActFetch, Leader: 1, Epoch: 3}, StateFetching},
		{"fenced: wait", func(f *Fetcher) Action { return f.Failed(3, ErrFencedLeaderEpoch) }, Action{Kind: ActWait, Leader: 1, Epoch: 3}, StateIdle},
		{"stale fetch result while idle", func(f *Fetcher) Action { return f.FetchResult(3, "d2") }, Action{Kind: ActWait, Leader: 1, Epoch: 3}, StateIdle},
		{"new epoch: manifest", func(f *Fetcher) Action { return f.NewLeader(2, 4) }, Action{Kind: ActFetchManifest, Leader: 2, Epoch: 4}, StateManifest},
		{"late truncation from old epoch ignored", func(f *Fetcher) Action { return f.TruncationDone(3) }, Action{Kind: ActFetchManifest, Leader: 2, Epoch: 4}, StateManifest},
		{"new epoch truncates again", func(f *Fetcher) Action { return f.ManifestApplied(4, "d2") }, Action{Kind: ActTruncate, Leader: 2, Epoch: 4}, StateTruncation},
		{"not leader (yet): retry", func(f *Fetcher) Action { return f.Failed(4, ErrNotLeader) }, Action{Kind: ActTruncate, Leader: 2, Epoch: 4, Backoff: true}, StateTruncation},
		{"same leader re-announced: no restart", func(f *Fetcher) Action { return f.NewLeader(2, 4) }, Action{Kind: ActTruncate, Leader: 2, Epoch: 4}, StateTruncation},
		{"truncation not done yet in epoch 4", func(f *Fetcher) Action { return f.ManifestApplied(4, "d2") }, Action{Kind: ActTruncate, Leader: 2, Epoch: 4}, StateTruncation},
		{"leader lost", func(f *Fetcher) Action { return f.LeaderLost() }, Action{Kind: ActWait, Leader: 2, Epoch: 4}, StateIdle},
	}
	f := NewFetcher()
	for _, s := range steps {
		got := s.do(f)
		if got != s.want || f.State() != s.st {
			t.Fatalf("%s: got %+v in %v, want %+v in %v", s.name, got, f.State(), s.want, s.st)
		}
	}
}
