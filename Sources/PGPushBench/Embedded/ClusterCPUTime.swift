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
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        return ticksPerSecond > 0 ? Double(ticks) / ticksPerSecond : nil
    }
}

/// The fields of `/proc/<pid>/stat` the benches read, in clock ticks.
struct ProcessStat {
    var parent: Int32
    var userTicks: Int
    var systemTicks: Int
    var reapedChildrenTicks: Int

    init?(pid: Int32) {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let nameEnd = stat.lastIndex(of: ")")
        else { return nil }
        // After the command name (which may hold spaces) come the fields from 3 (state) on: field N is at N - 3.
        let fields = stat[stat.index(after: nameEnd)...].split(separator: " ")
        guard fields.count > 14, let parent = Int32(fields[1]), let user = Int(fields[11]), let system = Int(fields[12]),
            let childUser = Int(fields[13]), let childSystem = Int(fields[14])
        else { return nil }
        self.parent = parent
        userTicks = user
        systemTicks = system
        reapedChildrenTicks = childUser + childSystem
    }
}
