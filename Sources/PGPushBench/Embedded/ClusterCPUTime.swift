import Foundation

/// The CPU time (user + system) a PostgreSQL cluster has used so far: the postmaster's own, every live child's
/// (backends, the WAL writer, the checkpointer) and that of the children it has reaped (a backend whose
/// connection closed). Read before and after a run, the difference is the server's work for the run. Linux
/// only (`/proc`); `nil` elsewhere or when the postmaster cannot be read.
enum ClusterCPUTime {
    static func seconds(dataDirectory: String) -> Double? {
        guard let pidLine = try? String(contentsOfFile: "\(dataDirectory)/postmaster.pid", encoding: .utf8)
            .split(separator: "\n").first, let postmaster = Int32(pidLine),
            let own = ProcessStat(pid: postmaster)
        else { return nil }
        var ticks = own.userTicks + own.systemTicks + own.reapedChildrenTicks
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        for entry in entries {
            guard let pid = Int32(entry), pid != postmaster, let stat = ProcessStat(pid: pid), stat.parent == postmaster
            else { continue }
            ticks += stat.userTicks + stat.systemTicks
        }
        return ProcessStat.seconds(ticks: ticks)
    }
}
