import Foundation
import NIOCore
import NIOEmbedded
import NIOHTTP1
import PGPushCore
import Synchronization
import Testing

@testable import PGPushTransport

@Suite("HTTP proxy: URL, NO_PROXY, reachability")
struct HTTPProxyConfigurationTests {
    @Test func parsesAProxyURLWithPercentEncodedCredentials() throws {
        let proxy = try HTTPProxyConfiguration(url: "http://relay:p%40ss%3Aw0rd%2F%25@proxy.internal:3128/")
        #expect(proxy.host == "proxy.internal")
        #expect(proxy.port == 3128)
        #expect(proxy.username == "relay")
        #expect(proxy.password == "p@ss:w0rd/%")
        #expect(proxy.redactedURL == "http://***@proxy.internal:3128")
        #expect("\(proxy)" == "http://***@proxy.internal:3128")
        #expect(proxy.proxyAuthorization == "Basic " + Data("relay:p@ss:w0rd/%".utf8).base64EncodedString())
    }

    @Test func defaultsAndLiterals() throws {
        let plain = try HTTPProxyConfiguration(url: " HTTP://Proxy.Example ")
        #expect(plain.host == "Proxy.Example")
        #expect(plain.port == 80)
        #expect(plain.username == nil && plain.proxyAuthorization == nil)
        #expect(plain.redactedURL == "http://Proxy.Example:80")

        let v6 = try HTTPProxyConfiguration(url: "http://[::1]:3128")
        #expect(v6.host == "::1")
        #expect(v6.redactedURL == "http://[::1]:3128")

        let userOnly = try HTTPProxyConfiguration(url: "http://token@10.0.0.1:8080")
        #expect(userOnly.proxyAuthorization == "Basic " + Data("token:".utf8).base64EncodedString())
        #expect(userOnly.redactedURL == "http://***@10.0.0.1:8080")
    }

    @Test(arguments: [
        ("https://u:secret@proxy:3128", "uses https://, which is not supported"),
        ("socks5://u:secret@proxy:1080", "has the scheme socks5://; only http:// proxies are supported"),
        ("proxy:3128", "must be an http:// URL"),
        ("u:secret@proxy:3128", "must be an http:// URL"),
        ("http://", "has no host"),
        ("http://u:secret@:3128", "has no host"),
        ("http://u:secret@proxy:0", "has an invalid port"),
        ("http://u:secret@proxy:http", "has an invalid port"),
        ("http://u:secret@proxy:3128/path", "must not have a path"),
        ("http://u:secret%zz@proxy:3128", "not valid percent-encoding"),
        ("http://:secret@proxy:3128", "has a password but no user name"),
    ])
    func refusesWhatItCannotUseWithoutQuotingTheSecret(url: String, problem: String) {
        #expect {
            try HTTPProxyConfiguration(url: url)
        } throws: { error in
            guard let error = error as? PGPushError else { return false }
            return error.code == .invalidConfiguration && error.message.contains(problem) && !error.description.contains("secret")
        }
    }

    @Test func resolvesTheFlagThenTheEnvironment() throws {
        #expect(try HTTPProxyConfiguration.resolve(flag: nil, environment: [:]) == nil)
        #expect(try HTTPProxyConfiguration.resolve(flag: nil, environment: ["HTTPS_PROXY": " ", "https_proxy": ""]) == nil)
        let upper = try #require(try HTTPProxyConfiguration.resolve(
            flag: nil, environment: ["HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2"]))
        #expect(upper.host == "upper")
        let lower = try #require(try HTTPProxyConfiguration.resolve(flag: nil, environment: ["https_proxy": "http://lower:2"]))
        #expect(lower.host == "lower")
        let flag = try #require(try HTTPProxyConfiguration.resolve(
            flag: "http://flag:3", environment: ["HTTPS_PROXY": "http://upper:1", "NO_PROXY": "a.example", "no_proxy": "b.example"]))
        #expect(flag.host == "flag")
        #expect(flag.bypass.names == ["a.example"])
        let lowerBypass = try #require(try HTTPProxyConfiguration.resolve(flag: "http://flag:3", environment: ["no_proxy": "b.example"]))
        #expect(lowerBypass.bypass.names == ["b.example"])

        #expect {
            try HTTPProxyConfiguration.resolve(flag: nil, environment: ["https_proxy": "https://u:secret@proxy:443"])
        } throws: { error in
            let message = (error as? PGPushError)?.message ?? ""
            return message.hasPrefix("https_proxy: proxy URL https://***@proxy:443") && !message.contains("secret")
        }
        #expect {
            try HTTPProxyConfiguration.resolve(flag: "ftp://proxy", environment: [:])
        } throws: { error in
            (error as? PGPushError)?.message.hasPrefix("--https-proxy: ") == true
        }
    }

    @Test func noProxyMatchesHostsSuffixesAndEverything() {
        let list = ProxyBypassList(" Example.com, .corp.internal, *.svc, localhost:8443, [::1]:80, 10.1.2.3 ,, ")
        #expect(list.names == ["example.com", "corp.internal", "svc", "localhost", "::1", "10.1.2.3"])
        for host in ["example.com", "api.EXAMPLE.com", "corp.internal", "a.b.corp.internal", "x.svc", "localhost", "::1", "[::1]", "10.1.2.3", "example.com."] {
            #expect(list.matches(host), "\(host)")
        }
        for host in ["badexample.com", "example.org", "internal", "127.0.0.1", "10.1.2.30", "api.push.apple.com"] {
            #expect(!list.matches(host), "\(host)")
        }
        #expect(ProxyBypassList("*").matches("api.push.apple.com"))
        #expect(ProxyBypassList("a.example, *").matchesEverything)
        // Nothing is excluded implicitly: loopback goes through the proxy unless listed.
        let empty = ProxyBypassList("")
        #expect(empty.isEmpty)
        #expect(!empty.matches("localhost") && !empty.matches("127.0.0.1"))
        #expect(empty.description == "-")
        #expect(list.description == "example.com,corp.internal,svc,localhost,::1,10.1.2.3")

        var proxy = try! HTTPProxyConfiguration(url: "http://proxy:3128")
        proxy.bypass = ProxyBypassList("fcm.googleapis.com")
        #expect(!proxy.tunnels(to: "fcm.googleapis.com"))
        #expect(proxy.tunnels(to: "api.push.apple.com"))
    }

    @Test func reachabilityReportsOnceEveryFewSecondsAndRecoversOnce() {
        let start = ContinuousClock.now
        var reachability = HTTPProxyReachability(reportEvery: .seconds(5), forgetAfter: .seconds(120))
        #expect(reachability.problem(at: start) == nil)
        #expect(reachability.tunnelFailed(to: "a:443", problem: "407", at: start) == .failing(problem: "407", since: start, failures: 1))
        #expect(reachability.tunnelFailed(to: "a:443", problem: "407", at: start + .seconds(1)) == nil)
        #expect(reachability.tunnelFailed(to: "b:443", problem: "502", at: start + .seconds(4)) == nil)
        #expect(reachability.problem(at: start + .seconds(4)) == "502")
        #expect(reachability.tunnelFailed(to: "a:443", problem: "407", at: start + .seconds(6))
            == .failing(problem: "407", since: start, failures: 4))
        // One target reachable again is not enough; the last one is.
        #expect(reachability.tunnelOpened(to: "a:443", at: start + .seconds(7)) == nil)
        #expect(reachability.problem(at: start + .seconds(7)) == "502")
        #expect(reachability.tunnelOpened(to: "b:443", at: start + .seconds(8)) == .recovered(after: .seconds(8)))
        #expect(reachability.problem(at: start + .seconds(8)) == nil)
        #expect(reachability.tunnelOpened(to: "b:443", at: start + .seconds(9)) == nil)
        // A new outage is reported at once.
        #expect(reachability.tunnelFailed(to: "a:443", problem: "refused", at: start + .seconds(10))
            == .failing(problem: "refused", since: start + .seconds(10), failures: 1))
        // A target nothing tries any more (its pool closed) stops counting.
        #expect(reachability.problem(at: start + .seconds(131)) == nil)
        #expect(reachability.tunnelFailed(to: "c:443", problem: "403", at: start + .seconds(200))
            == .failing(problem: "403", since: start + .seconds(200), failures: 1))
    }
}

@Suite("HTTP proxy: the CONNECT handshake")
struct HTTPConnectHandlerTests {
    struct Handshake {
        let channel: EmbeddedChannel
        let established: EventLoopPromise<Void>
        let deadline: NIODeadline

        init(authorization: String? = "Basic dTpw") throws {
            channel = EmbeddedChannel()
            established = channel.eventLoop.makePromise()
            deadline = .uptimeNanoseconds(10_000_000_000)
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(HTTPRequestEncoder(), name: HTTPConnectTunnel.encoderName)
            try sync.addHandler(ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes)), name: HTTPConnectTunnel.decoderName)
            try sync.addHandler(HTTPConnectHandler(
                authority: "api.push.apple.com:443", authorization: authorization, deadline: deadline, established: established,
                makeError: { HTTPProxyError(kind: $0, proxy: "http://***@proxy:3128", target: "api.push.apple.com:443") }),
                name: HTTPConnectTunnel.handlerName)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 3128)).wait()
        }

        /// Everything written to the proxy so far.
        func sent() throws -> String {
            var text = ""
            while let buffer = try channel.readOutbound(as: ByteBuffer.self) { text += String(buffer: buffer) }
            return text
        }

        func receive(_ text: String) throws {
            try channel.writeInbound(ByteBuffer(string: text))
        }

        func outcome() -> Result<Void, any Error>? {
            let box = Mutex<Result<Void, any Error>?>(nil)
            // An embedded loop's completed future runs the callback at once.
            established.futureResult.whenComplete { result in box.withLock { $0 = result } }
            return box.withLock { $0 }
        }

        func error() -> HTTPProxyError? {
            if case .failure(let error)? = outcome() { return error as? HTTPProxyError }
            return nil
        }
    }

    @Test func sendsConnectWithHostAndCredentialsAndOpensOnA2xx() throws {
        let handshake = try Handshake()
        let request = try handshake.sent()
        #expect(request.hasPrefix("CONNECT api.push.apple.com:443 HTTP/1.1\r\n"), "\(request)")
        #expect(request.contains("Host: api.push.apple.com:443\r\n"))
        #expect(request.contains("Proxy-Authorization: Basic dTpw\r\n"))
        #expect(request.hasSuffix("\r\n\r\n"))
        #expect(!request.lowercased().contains("transfer-encoding"))
        #expect(handshake.outcome() == nil)
        try handshake.receive("HTTP/1.1 200 Connection established\r\nVia: test\r\n\r\n")
        guard case .success? = handshake.outcome() else {
            Issue.record("tunnel not established: \(String(describing: handshake.outcome()))")
            return
        }
        #expect(handshake.channel.isActive)
        _ = try? handshake.channel.finish()
    }

    @Test func sendsNoAuthorizationWithoutCredentials() throws {
        let handshake = try Handshake(authorization: nil)
        #expect(!(try handshake.sent()).contains("Proxy-Authorization"))
        try handshake.receive("HTTP/1.0 200 OK\r\n\r\n")
        guard case .success? = handshake.outcome() else {
            Issue.record("tunnel not established")
            return
        }
        _ = try? handshake.channel.finish()
    }

    @Test(arguments: [
        ("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n",
         "407 Proxy Authentication Required"),
        ("HTTP/1.1 403 Forbidden\r\nContent-Length: 9\r\n\r\nForbidden", "403 Forbidden"),
        ("HTTP/1.1 502 Bad Gateway\r\n\r\n", "502 Bad Gateway"),
    ])
    func anyOtherAnswerFailsTheConnectionAndSaysWhy(answer: String, status: String) throws {
        let handshake = try Handshake()
        _ = try handshake.sent()
        try? handshake.receive(answer)
        let error = try #require(handshake.error())
        #expect(error.status == status)
        #expect(error.description.contains("HTTPS proxy http://***@proxy:3128 refused CONNECT api.push.apple.com:443: \(status)"), "\(error)")
        #expect(!handshake.channel.isActive, "the connection is closed")
        #expect(TLSRefusal(error) == nil, "a proxy's refusal never pauses an app")
    }

    @Test func aCloseOrGarbageOrSilenceFailsIt() throws {
        let closed = try Handshake()
        try closed.channel.close().wait()
        #expect(closed.error()?.kind == .closed(nil))

        let garbage = try Handshake()
        try? garbage.receive("SSH-2.0-OpenSSH_9.6\r\n")
        guard case .malformed? = garbage.error()?.kind else {
            Issue.record("expected malformed, got \(String(describing: garbage.outcome()))")
            return
        }

        let silent = try Handshake()
        silent.channel.embeddedEventLoop.advanceTime(to: silent.deadline)
        #expect(silent.error()?.kind == .timedOut)
        #expect(silent.error()?.description == "HTTPS proxy http://***@proxy:3128 did not open a tunnel to api.push.apple.com:443: no answer within the connect timeout")
        #expect(!silent.channel.isActive)
    }
}
