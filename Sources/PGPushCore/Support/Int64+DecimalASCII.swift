extension Int64 {
    /// Calls `body` with the number in decimal as ASCII bytes on the stack, a minus first when it is negative: a
    /// number written into a hash or a request's header block once per request, with no string of its own.
    public func withDecimalASCII<Result>(_ body: (UnsafeBufferPointer<UInt8>) throws -> Result) rethrows -> Result {
        // 19 digits and a sign hold every Int64.
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { buffer in
            var start = buffer.count
            var magnitude = self.magnitude
            repeat {
                start -= 1
                buffer[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if self < 0 {
                start -= 1
                buffer[start] = UInt8(ascii: "-")
            }
            return try body(UnsafeBufferPointer(rebasing: buffer[start...]))
        }
    }
}
