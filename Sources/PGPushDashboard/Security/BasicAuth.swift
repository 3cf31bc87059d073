import Foundation

/// HTTP Basic credentials, checked in constant time.
struct BasicAuth: Sendable {
    let user: String
    let password: String

    /// Whether an `Authorization` header carries this user and password. The comparison takes the same time
    /// wherever the first difference is, and for a wrong length too, so a timing measurement tells nothing.
    func accepts(_ header: String?) -> Bool {
        guard let header, header.count > 6, header.prefix(6).lowercased() == "basic " else { return false }
        guard let data = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)) else {
            return false
        }
        let expected = Array("\(user):\(password)".utf8)
        return Self.constantTimeEqual(Array(data), expected)
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt64(a.count ^ b.count)
        let n = max(a.count, b.count)
        for i in 0..<n {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            difference |= UInt64(x ^ y)
        }
        return difference == 0
    }
}

/// Whether a POST comes from the dashboard's own pages (the guard against cross-site request forgery: a
/// browser sends saved Basic credentials with a forged form as well).
enum SameOrigin {
    /// Refuses `Sec-Fetch-Site: cross-site` (and `same-site`: another host of the same site is not the
    /// dashboard), and an `Origin` whose host and port are not the request's `Host`. A request with neither
    /// header (curl, scripts) is not from a browser, and passes.
    static func allows(secFetchSite: String?, origin: String?, host: String?) -> Bool {
        if let site = secFetchSite?.lowercased(), site != "same-origin", site != "none" { return false }
        guard let origin else { return true }
        if origin == "null" { return false }
        guard let host, let schemeEnd = origin.range(of: "://") else { return false }
        let authority = origin[schemeEnd.upperBound...]
        return authority.lowercased() == host.lowercased()
    }
}
