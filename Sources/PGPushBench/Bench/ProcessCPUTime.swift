import Foundation

/// CPU time (user + system) from `getrusage`, for the benches' CPU per request: this process's own, or that of
/// the children it has reaped, so a child's cost is the change across its run.
enum ProcessCPUTime {
    /// This process, all threads, so far.
    static func ownSeconds() -> Double { seconds(RUSAGE_SELF.rawValue) }

    /// The children this process has waited for, so far. Read before and after a child's run: the difference is
    /// that child's CPU, as long as no other child ended meanwhile.
    static func reapedChildrenSeconds() -> Double { seconds(RUSAGE_CHILDREN.rawValue) }

    private static func seconds(_ who: Int32) -> Double {
        var usage = rusage()
        guard getrusage(who, &usage) == 0 else { return 0 }
        func value(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1e6 }
        return value(usage.ru_utime) + value(usage.ru_stime)
    }
}
