/// Where a ``PushOutbox`` starts its held requests: a connection pool. Each submission's `onOutcome` runs
/// exactly once, when its answer (or the reason none came) is known; `start` does not wait for the answers.
///
/// ``HTTP2ConnectionPool`` is the one production sink. A test's fake (PGPushDispatcherTesting's `FakePushPool`)
/// answers in-process: at once, after a delay on a test clock, or not until it is told.
public protocol PushBatchSink: AnyObject, Sendable {
    /// Starts every request of `batch`, in order, without waiting for their answers.
    func start(_ batch: [PushSubmission]) async
}

extension HTTP2ConnectionPool: PushBatchSink {}
