import CNGHTTP2

/// A call into libnghttp2 that failed, with the library's own message for its code.
struct NGHTTP2Error: Error, CustomStringConvertible {
    /// What was asked of the library, e.g. "mem_recv".
    var operation: String
    /// The library's (negative) `nghttp2_error` code.
    var code: Int

    var description: String {
        "nghttp2 \(operation) failed: \(String(cString: nghttp2_strerror(Int32(truncatingIfNeeded: code)))) (\(code))"
    }

    /// Throws for a negative return value, the library's way of reporting an error.
    static func check(_ result: some BinaryInteger, _ operation: String) throws {
        if result < 0 { throw NGHTTP2Error(operation: operation, code: Int(result)) }
    }
}
