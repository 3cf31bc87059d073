// Reports made outside QueueStore: by another store that keeps the same rules (PGPushDispatcherTesting's
// in-memory store), and by tests.

extension CompletionReport {
    /// A write's report: `leaseLost` names the chunks whose lease this process no longer held.
    public static func written(leaseLost: [Int64] = [], jobsFinished: Int = 0) -> CompletionReport {
        CompletionReport(leaseLost: leaseLost, jobsFinished: jobsFinished)
    }
}

extension QueueStore.MaintenanceReport {
    /// A pass that did nothing.
    public static func nothingDone(ranAsLeader: Bool) -> QueueStore.MaintenanceReport {
        QueueStore.MaintenanceReport(ranAsLeader: ranAsLeader)
    }
}
