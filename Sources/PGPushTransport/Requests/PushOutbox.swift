/// Requests one task has made ready, held until the task is about to wait and then started together: a batch
/// reaches each connection in one hop to its event loop and leaves in one flush, where requests started one at
/// a time from another thread are written one at a time, a TLS record and a write syscall each.
///
/// A caller that limits its requests in flight takes each request's permit before adding it, and sends the
/// outbox before it waits for another: held requests hold permits. An outbox belongs to one task and is never
/// shared.
public final class PushOutbox {
    /// The most requests held before they are started: enough that a flush carries many, few enough that the
    /// first of a large chunk leaves at once.
    public static let capacity = 64

    private var submissions: [PushSubmission] = []
    private var pool: (any PushBatchSink)?

    public init() {
        submissions.reserveCapacity(Self.capacity)
    }

    /// Holds a request for `pool`; the held ones are started first when the pool differs or the outbox is full.
    public func add(_ submission: PushSubmission, to pool: any PushBatchSink) async {
        if let held = self.pool, held !== pool { await send() }
        self.pool = pool
        submissions.append(submission)
        if submissions.count >= Self.capacity { await send() }
    }

    /// Starts every held request. Call it before anything that may wait, and at the end.
    public func send() async {
        guard let pool, !submissions.isEmpty else { return }
        let batch = submissions
        submissions.removeAll(keepingCapacity: true)
        await pool.start(batch)
    }
}
