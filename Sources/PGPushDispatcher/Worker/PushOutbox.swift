import PGPushTransport

/// Requests one task has made ready, held until the task is about to wait and then started together: a batch
/// reaches each connection in one hop to its event loop and leaves in one flush, where requests started one at
/// a time from another thread are written one at a time, a TLS record and a write syscall each.
///
/// Each request already holds its app's permit when it is added. The outbox belongs to one task and is never
/// shared.
final class PushOutbox {
    /// The most requests held before they are started: enough that a flush carries many, few enough that the
    /// first of a large chunk leaves at once.
    static let capacity = 64

    private var submissions: [PushSubmission] = []
    private var pool: HTTP2ConnectionPool?

    init() {
        submissions.reserveCapacity(Self.capacity)
    }

    /// Holds a request for `pool`; the held ones are started first when the pool differs or the outbox is full.
    func add(_ submission: PushSubmission, to pool: HTTP2ConnectionPool) async {
        if let held = self.pool, held !== pool { await send() }
        self.pool = pool
        submissions.append(submission)
        if submissions.count >= Self.capacity { await send() }
    }

    /// Starts every held request. Call it before anything that may wait, and at the end.
    func send() async {
        guard let pool, !submissions.isEmpty else { return }
        let batch = submissions
        submissions.removeAll(keepingCapacity: true)
        await pool.start(batch)
    }
}
