import PGPushCore

extension ProviderResponse {
    /// The reason a bearer token's source hears when a request carrying it was answered 401.
    public static let unauthenticated = "UNAUTHENTICATED"
    private static let fcmErrorDetail = Array("google.firebase.fcm.v1.FcmError".utf8)

    /// A 401 for an OAuth access token goes back to the token's source as `UNAUTHENTICATED`; a 401 with an
    /// FCM error detail (THIRD_PARTY_AUTH_ERROR) is about another credential, not this token.
    var fcmAccessTokenRejection: String? {
        guard status == 401, !body.containsSequence(Self.fcmErrorDetail) else { return nil }
        return Self.unauthenticated
    }
}

extension Array where Element == UInt8 {
    /// Whether `needle` occurs in these bytes.
    func containsSequence(_ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, count >= needle.count else { return needle.isEmpty }
        for start in 0...(count - needle.count) where self[start] == needle[0] {
            if self[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}
