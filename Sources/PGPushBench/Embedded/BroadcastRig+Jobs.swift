import Foundation
import PGPushDevelopment

/// Many small jobs on one rig: `pgpush bench small-jobs` and `pgpush bench mixed`.
extension BroadcastRig {
    /// Registers `count` devices, each with its own user id `<userPrefix><n>` (n from 1), in one statement.
    /// Tokens start with `5a`, so they never collide with the broadcast devices (`00…`) or the warm-up ones (`fe…`).
    func registerUserDevices(count: Int, userPrefix: String = "u") async throws {
        guard count > 0 else { return }
        try await database.registerUserDevices(appID: appID, count: count, userPrefix: userPrefix)
    }

    /// Registers `count` live devices carrying `tags` and no user id, in one statement.
    func registerTaggedDevices(count: Int, tags: [String]) async throws {
        guard count > 0 else { return }
        try await database.registerTaggedDevices(appID: appID, count: count, tags: tags)
    }

    /// Waits until every running worker has registered in `push.workers`, then sends one one-token job per
    /// worker (fresh `warmup-<n>` users) and waits for them: connection setup and provider-token signing are
    /// then behind the workers, not in what is measured. Which worker takes which warm-up job is up to them.
    func warmUpWorkers(timeout: Duration) async throws {
        let ids = workerIDs
        let deadline = ContinuousClock.now + timeout
        while try await database.registeredWorkers(ids) < ids.count {
            guard ContinuousClock.now < deadline else {
                throw EmbeddedError("workers did not register within \(timeout); worker log:\n\(workerLogTail())")
            }
            try await checkWorkersAlive()
            try await Task.sleep(for: .milliseconds(50))
        }
        // A fresh prefix per call, so a second warm-up (or a second run on a shared database) registers new devices.
        let round = UUID().uuidString.prefix(8).lowercased()
        let users = ids.indices.map { "warmup-\(round)-\($0 + 1)" }
        try await database.registerWarmUpDevices(appID: appID, round: String(round), users: users)
        var jobs: [Int64] = []
        for user in users { jobs.append(try await enqueue(userIDs: [user])) }
        let states = try await waitForJobs(jobs, interval: .milliseconds(20), timeout: deadline - .now)
        guard states.keys.allSatisfy({ $0 == "done" }) else {
            throw EmbeddedError("warm-up jobs ended \(states); worker log:\n\(workerLogTail())")
        }
    }

    /// How many of `jobs` (all of this rig's app) are still queued or running, per state. Read through the
    /// active-jobs index, so a poll costs what is unfinished, not the whole list: a poll of 20,000 ids against
    /// a table of 300,000 finished jobs took 170 ms of the database's CPU, which the measured worker lost.
    /// Ids that are one unbroken run (a burst from one sequence) are passed as their bounds alone: decoding and
    /// hashing 20,000 ids cost 15–20 ms of the database's CPU per poll, 5 % of the machine the worker shares.
    func unfinishedJobStates(_ jobs: [Int64]) async throws -> [String: Int] {
        let (first, last) = (jobs.min() ?? 0, jobs.max() ?? -1)
        let listed = last - first + 1 == Int64(Set(jobs).count) ? [] : jobs
        return try await database.unfinishedJobStates(appID: appID, first: first, last: last, listed: listed)
    }

    /// Polls the jobs every `interval` until none is queued or running and returns their final states; throws
    /// after `timeout` or when a worker dies. Samples the workers' memory on the way. `observe` sees the
    /// unfinished ones by state and the rest as `ended`.
    @discardableResult
    func waitForJobs(
        _ jobs: [Int64], interval: Duration, timeout: Duration, observe: ([String: Int]) -> Void = { _ in }
    ) async throws -> [String: Int] {
        let deadline = ContinuousClock.now + timeout
        while true {
            var states = try await unfinishedJobStates(jobs)
            let unfinished = states.values.reduce(0, +)
            if unfinished == 0 { return try await database.jobStates(jobs) }
            states["ended"] = jobs.count - unfinished
            observe(states)
            guard ContinuousClock.now < deadline else {
                throw EmbeddedError("\(jobs.count) jobs did not finish within \(timeout): \(Self.describe(states))")
            }
            try await checkWorkersAlive()
            sampleWorkerMemory()
            try await Task.sleep(for: interval)
        }
    }

    /// `done 180, running 20`, in a fixed order.
    static func describe(_ states: [String: Int]) -> String {
        let order = ["queued", "running", "ended", "done", "failed", "cancelled"]
        return states.sorted { (order.firstIndex(of: $0.key) ?? 9, $0.key) < (order.firstIndex(of: $1.key) ?? 9, $1.key) }
            .map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }
}
