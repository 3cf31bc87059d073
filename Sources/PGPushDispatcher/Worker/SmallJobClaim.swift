import PGPushCore
import PGPushStore

extension Worker {
    /// Due small jobs in one statement at most, the budget's room permitting: a job is at least one
    /// notification, so more than the room could not all be claimed. A small room still expands a batch worth
    /// its statement; what it cannot take is left for a claim.
    static let smallJobBatch = 1000
    static let smallestSmallJobBatch = 100

    static func smallJobLimit(for budget: ClaimBudget) -> Int {
        max(min(smallJobBatch, budget.maximumChunks, budget.room), smallestSmallJobBatch)
    }

    /// Expands due small jobs and claims their chunks with `budget` in one statement, as the expansion does
    /// with its own turn and the claim service with one left to it. Records what was claimed as held before
    /// any of it can start. Returns the claimed chunks (the caller starts them), what to do next, and whether
    /// a full batch suggests more jobs are due.
    func expandAndClaimSmallJobs(
        budget: ClaimBudget
    ) async throws -> (claimed: [ClaimedChunk], next: WorkerStateMachine<ChunkCompletion>.Action, more: Bool) {
        let limit = Self.smallJobLimit(for: budget)
        let expansion: QueueStore.SmallJobExpansion
        do {
            expansion = try await store.expandDueSmallJobs(
                chunkSize: configuration.chunkSize, limit: limit, claiming: budget, lease: configuration.lease)
        } catch {
            perform(machine.withLock { $0.expansionClaimFailed() })
            throw error
        }
        // A claim like the claim service's: it shows the primary answering, as that one's does.
        readiness.store(true, ordering: .relaxed)
        databaseAnswered()
        let claimed = expansion.claimed
        if !claimed.isEmpty { heldChunks.withLock { $0.formUnion(claimed.map(\.id)) } }
        let (next, more) = machine.withLock {
            ($0.smallJobsExpanded(expansion.jobs, claimed: claimed.map { ($0.appID, $0.estimatedTokens) },
                                  budget: budget, unclaimedChunks: expansion.unclaimedChunks),
             $0.hasMoreSmallJobs(expansion.jobs, batch: limit))
        }
        return (claimed, next, more)
    }
}
