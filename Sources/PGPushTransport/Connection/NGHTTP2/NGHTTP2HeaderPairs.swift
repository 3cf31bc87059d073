import CNGHTTP2

/// Turns a request's ``HTTP2HeaderBlock`` into the `nghttp2_nv` pairs `nghttp2_submit_request` reads, pointing
/// into the block's own bytes. The library copies names and values during the call, so the pointers need live
/// only that long, and one scratch array of pairs serves every request of the connection.
struct NGHTTP2HeaderPairs {
    private var pairs: [nghttp2_nv] = []

    init() {
        pairs.reserveCapacity(16)
    }

    /// Calls `body` with the pairs of `block`, valid during the call only.
    mutating func withPairs<Result>(
        of block: HTTP2HeaderBlock, _ body: (UnsafePointer<nghttp2_nv>, Int) -> Result
    ) -> Result {
        guard block.count > 0 else {
            // An empty block still needs a valid address for the library.
            return withUnsafeTemporaryAllocation(of: nghttp2_nv.self, capacity: 1) { body(UnsafePointer($0.baseAddress!), 0) }
        }
        pairs.removeAll(keepingCapacity: true)
        return block.withFields { bytes, fields in
            // Fields whose names and values are all empty have no bytes, and still need a valid address.
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1) { spare in
                let base = bytes.baseAddress.map { UnsafeMutablePointer(mutating: $0) } ?? spare.baseAddress!
                for field in fields {
                    let flags = field.indexable ? NGHTTP2_NV_FLAG_NONE : NGHTTP2_NV_FLAG_NO_INDEX
                    pairs.append(nghttp2_nv(
                        name: base + Int(field.start), value: base + field.valueStart,
                        namelen: Int(field.nameCount), valuelen: Int(field.valueCount), flags: UInt8(flags.rawValue)))
                }
                return pairs.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
            }
        }
    }
}
