import CNGHTTP2
import NIOHPACK

/// Turns a request's HPACK header block into the `nghttp2_nv` pairs `nghttp2_submit_request` reads. The
/// library copies names and values during the call, so one scratch buffer serves every request of the
/// connection and grows only to the largest block.
struct NGHTTP2HeaderBlock {
    private struct Field {
        var start: Int
        var nameCount: Int
        var valueCount: Int
        var flags: UInt8
    }

    private var bytes: [UInt8] = []
    private var fields: [Field] = []
    private var pairs: [nghttp2_nv] = []

    init() {
        bytes.reserveCapacity(1024)
        fields.reserveCapacity(16)
        pairs.reserveCapacity(16)
    }

    /// Calls `body` with the pairs of `headers`, valid during the call only.
    mutating func withPairs<Result>(
        of headers: HPACKHeaders, _ body: (UnsafePointer<nghttp2_nv>, Int) -> Result
    ) -> Result {
        bytes.removeAll(keepingCapacity: true)
        fields.removeAll(keepingCapacity: true)
        for (name, value, indexing) in headers {
            let start = bytes.count
            bytes.append(contentsOf: name.utf8)
            let nameCount = bytes.count - start
            bytes.append(contentsOf: value.utf8)
            // Values unique to a request (the device token's path, the apns-id) stay out of the HPACK table,
            // as the request builder asked.
            let flags = indexing == .indexable ? NGHTTP2_NV_FLAG_NONE : NGHTTP2_NV_FLAG_NO_INDEX
            fields.append(Field(start: start, nameCount: nameCount, valueCount: bytes.count - start - nameCount, flags: UInt8(flags.rawValue)))
        }
        // An empty block still needs a valid address for the library.
        if bytes.isEmpty { bytes.append(0) }
        pairs.removeAll(keepingCapacity: true)
        return bytes.withUnsafeMutableBufferPointer { storage in
            let base = storage.baseAddress!
            for field in fields {
                pairs.append(
                    nghttp2_nv(
                        name: base + field.start, value: base + field.start + field.nameCount,
                        namelen: field.nameCount, valuelen: field.valueCount, flags: field.flags))
            }
            return pairs.withUnsafeBufferPointer { body($0.baseAddress!, $0.count) }
        }
    }
}
