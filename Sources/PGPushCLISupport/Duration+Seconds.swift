extension Duration {
    /// Whole and fractional seconds, for progress rates and reports.
    public var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// A duration from a command-line number of seconds.
    public static func seconds(fromOption value: Double) -> Duration {
        .milliseconds(Int64((value * 1000).rounded()))
    }
}
