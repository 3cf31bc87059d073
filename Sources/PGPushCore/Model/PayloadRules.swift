import Foundation

/// Client-side checks of a notification body before it is enqueued or sent.
///
/// They mirror what APNs enforces, so a bad payload fails in the producer's hands instead of
/// coming back as `PayloadTooLarge` for every token of a broadcast.
public enum PayloadRules {
    /// Checks that `payload` is a JSON object with an `aps` dictionary and at most
    /// `pushType.maximumPayloadBytes` bytes.
    /// - Throws: ``PGPushError`` with code ``PGPushError/Code/invalidInput``.
    public static func validate(payload: [UInt8], pushType: PushType) throws(PGPushError) {
        guard !payload.isEmpty else {
            throw PGPushError(.invalidInput, "payload is empty")
        }
        // Size first: it is cheap and bounds the work of the parse below.
        guard payload.count <= pushType.maximumPayloadBytes else {
            throw PGPushError(
                .invalidInput,
                "payload is \(payload.count) bytes; \(pushType.rawValue) allows at most \(pushType.maximumPayloadBytes)"
            )
        }
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: Data(payload), options: [])
        } catch {
            throw PGPushError(.invalidInput, "payload is not valid JSON", underlying: error)
        }
        guard let object = parsed as? [String: Any] else {
            throw PGPushError(.invalidInput, "payload must be a JSON object")
        }
        guard let aps = object["aps"] else {
            throw PGPushError(.invalidInput, "payload has no \"aps\" dictionary")
        }
        guard aps is [String: Any] else {
            throw PGPushError(.invalidInput, "payload's \"aps\" must be a dictionary")
        }
    }
}
