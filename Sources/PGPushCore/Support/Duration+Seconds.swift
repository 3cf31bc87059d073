extension Duration {
    /// Whole and fractional seconds, for rates, backoff arithmetic and SQL intervals.
    public var inSeconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
