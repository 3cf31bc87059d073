import Foundation

import Hummingbird
import Logging

/// What every response carries and every request must pass, before any route runs:
/// - the security headers (a strict Content-Security-Policy: nothing from another host, no inline script or
///   style; no framing; no sniffing; no caching of pages);
/// - HTTP Basic authentication when a password is configured (401 otherwise);
/// - read-only refusal of every method but GET and HEAD unless actions are allowed (405);
/// - the cross-site check of every POST (403).
struct SecurityMiddleware<Context: RequestContext>: RouterMiddleware {
    let auth: BasicAuth?
    let allowActions: Bool
    let logger: Logger

    static var contentSecurityPolicy: String {
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
            + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await decide(request, context: context, next: next)
        response.headers[.contentSecurityPolicy] = Self.contentSecurityPolicy
        response.headers[.xContentTypeOptions] = "nosniff"
        response.headers[.init("X-Frame-Options")!] = "DENY"
        response.headers[.init("Referrer-Policy")!] = "same-origin"
        if response.headers[.cacheControl] == nil {
            response.headers[.cacheControl] = "no-store"
        }
        return response
    }

    private func decide(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let auth, !auth.accepts(request.headers[.authorization]) {
            return Response(
                status: .unauthorized,
                headers: [.wwwAuthenticate: "Basic realm=\"pgpush dashboard\", charset=\"UTF-8\"", .contentType: "text/plain; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: "authentication required\n")))
        }
        switch request.method {
        case .get, .head:
            return try await next(request, context)
        case .post where allowActions:
            guard SameOrigin.allows(
                secFetchSite: request.headers[.init("Sec-Fetch-Site")!], origin: request.headers[.origin],
                host: request.head.authority)
            else {
                logger.warning("refused a cross-site POST", metadata: ["path": "\(request.uri.path)"])
                return Response(
                    status: .forbidden, headers: [.contentType: "text/plain; charset=utf-8"],
                    body: .init(byteBuffer: ByteBuffer(string: "cross-site request refused\n")))
            }
            return try await next(request, context)
        default:
            return Response(
                status: .methodNotAllowed,
                headers: [.allow: "GET, HEAD", .contentType: "text/plain; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: allowActions
                    ? "method not allowed\n" : "the dashboard is read-only: start it with --allow-actions to act\n")))
        }
    }
}
