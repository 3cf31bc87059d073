import Foundation

/// The fields of `/proc/<pid>/stat` the benches read, in clock ticks.
struct ProcessStat {
    var parent: Int32
    var userTicks: Int
    var systemTicks: Int
    var reapedChildrenTicks: Int

    /// The process's own CPU time so far (user + system), in seconds.
    var cpuSeconds: Double? { Self.seconds(ticks: userTicks + systemTicks) }

    /// Clock ticks as seconds; `nil` where the tick rate cannot be read.
    static func seconds(ticks: Int) -> Double? {
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        return ticksPerSecond > 0 ? Double(ticks) / ticksPerSecond : nil
    }

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
