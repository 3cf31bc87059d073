import PGPushStore
import Foundation

/// SVG drawn by the server: the overview's sends per minute, and each job's progress bar.
enum Charts {
    /// Sends per minute over the last hour, one line per platform; `counts[platform][minute]`.
    static func sendsPerMinute(_ counts: [String: [Int64]], windowStart: Date) -> HTML {
        let width = 720.0, height = 180.0, left = 48.0, bottom = 22.0, top = 8.0
        let plotWidth = width - left - 8, plotHeight = height - bottom - top
        let maximum = max(1, counts.values.flatMap { $0 }.max() ?? 1)
        let scale = niceCeiling(maximum)
        func x(_ minute: Int) -> Double { left + plotWidth * Double(minute) / 59 }
        func y(_ value: Int64) -> Double { top + plotHeight * (1 - Double(value) / Double(scale)) }
        var shapes: [HTML] = []
        for fraction in [0.0, 0.5, 1.0] {
            let value = Int64(Double(scale) * fraction)
            let yy = y(value)
            shapes.append("<line class=\"grid\" x1=\"\(fmt(left))\" x2=\"\(fmt(width - 8))\" y1=\"\(fmt(yy))\" y2=\"\(fmt(yy))\"/>")
            shapes.append("<text x=\"\(fmt(left - 6))\" y=\"\(fmt(yy + 4))\" text-anchor=\"end\">\(Format.count(value))</text>")
        }
        for (minute, label, anchor) in [(0, "−60 min", "start"), (30, "−30 min", "middle"), (59, "now", "end")] {
            shapes.append("<text x=\"\(fmt(x(minute)))\" y=\"\(fmt(height - 6))\" text-anchor=\"\(anchor)\">\(label)</text>")
        }
        for platform in Platforms.all {
            guard let series = counts[platform] else { continue }
            let points = series.enumerated().map { "\(fmt(x($0.offset))),\(fmt(y($0.element)))" }.joined(separator: " ")
            shapes.append("<polyline class=\"line-\(platform)\" points=\"\(points)\"><title>\(platform) sends per minute</title></polyline>")
        }
        let total = counts.values.flatMap { $0 }.reduce(0, +)
        return """
            <svg id="sends-chart" viewBox="0 0 \(Int(width)) \(Int(height))" width="\(Int(width))" height="\(Int(height))" role="img" aria-label="Sends per minute over the last hour: \(Format.count(total)) in all">\(shapes.joined())</svg>
            """
    }

    /// A job's progress split by platform: delivered and failed of iOS, then of Android, then of the web, then
    /// the tokens held back by a frequency cap, then what is pending.
    static func progress(_ job: DashboardJobRow) -> HTML {
        let width = 160.0, height = 12.0
        let done = job.delivered + job.failed + job.capped
        let total = max(job.total ?? done, done)
        guard total > 0 else {
            return "<svg class=\"bar\" width=\"\(Int(width))\" height=\"\(Int(height))\" role=\"img\" aria-label=\"no audience counted yet\"><rect class=\"pending\" width=\"\(Int(width))\" height=\"\(Int(height))\"/></svg>"
        }
        let parts: [(String, Int64)] = [
            ("ios", job.iosDelivered), ("fail", job.iosFailed), ("android", job.androidDelivered), ("fail", job.androidFailed),
            ("web", job.webDelivered), ("fail", job.webFailed), ("capped", job.capped),
        ]
        var x = 0.0
        var rects: [HTML] = ["<rect class=\"pending\" width=\"\(Int(width))\" height=\"\(Int(height))\"/>"]
        for (cls, value) in parts where value > 0 {
            let w = width * Double(value) / Double(total)
            rects.append("<rect class=\"\(cls)\" x=\"\(fmt(x))\" width=\"\(fmt(w))\" height=\"\(Int(height))\"/>")
            x += w
        }
        let label = "iOS \(Format.count(job.iosDelivered)) delivered, \(Format.count(job.iosFailed)) failed; "
            + "Android \(Format.count(job.androidDelivered)) delivered, \(Format.count(job.androidFailed)) failed; "
            + "Web \(Format.count(job.webDelivered)) delivered, \(Format.count(job.webFailed)) failed; "
            + (job.capped > 0 ? "\(Format.count(job.capped)) capped; " : "") + "of \(Format.count(total))"
        return "<svg class=\"bar\" width=\"\(Int(width))\" height=\"\(Int(height))\" role=\"img\" aria-label=\"\(label)\"><title>\(label)</title>\(rects.joined())</svg>"
    }

    static func fmt(_ v: Double) -> String { String(format: "%.1f", v) }

    /// 1, 2 or 5 times a power of ten, at least `value`.
    static func niceCeiling(_ value: Int64) -> Int64 {
        var magnitude: Int64 = 1
        while magnitude * 10 <= value { magnitude *= 10 }
        for step in [1, 2, 5, 10] as [Int64] where step * magnitude >= value { return step * magnitude }
        return value
    }
}

/// The platforms a device, a delivery or a job's part can have, in the order every page lists them.
enum Platforms {
    static let all = ["ios", "android", "web"]

    /// How the legends name them.
    static func label(_ platform: String) -> String {
        switch platform {
        case "ios": "iOS (APNs)"
        case "android": "Android (FCM)"
        case "web": "Web (Web Push)"
        default: platform
        }
    }

    /// A platform filter's value when it is one of ``all``; anything else is no filter.
    static func parse(_ value: String?) -> String? {
        value.flatMap { all.contains($0) ? $0 : nil }
    }
}
