import Foundation
import PGPushCore
#if canImport(Glibc)
import Glibc
#endif

/// A throwaway nginx that stands in for APNs in benchmarks: TLS and HTTP/2 on a loopback port, 1,000 streams
/// per connection as APNs advertises, and a bodiless 200 to every request. It checks nothing (no provider
/// token, no payload), so it measures the client alone against a server written in C, the same one h2load
/// measures in the same run.
///
/// Debian's `nginx`, a generated configuration in a directory of its own, daemonised; ``stop()`` ends it and
/// removes the directory. As root its worker processes run as `nobody`.
public final class NginxAPNsStandIn: @unchecked Sendable {
    public let port: Int
    private let directory: String
    private let lock = NSLock()
    private var running = false

    /// `https://127.0.0.1:<port>`, the base URL a worker's `--apns-endpoint` takes.
    public var endpoint: String { "https://127.0.0.1:\(port)" }

    /// Starts nginx with the given server certificate and key (PEM; the certificate must name 127.0.0.1 or
    /// the client must trust it otherwise) and `workerProcesses` worker processes.
    public static func start(certificatePath: String, keyPath: String, workerProcesses: Int = 2) throws -> NginxAPNsStandIn {
        guard let executable = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
            .first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else {
            throw PGPushError(.invalidConfiguration, "nginx is not installed: apt-get install nginx")
        }
        let standIn = NginxAPNsStandIn(directory: try makeTemporaryDirectory(prefix: "pgpush-nginx-"), port: try freeLoopbackPort())
        do {
            try standIn.launch(executable: executable, certificatePath: certificatePath, keyPath: keyPath, workerProcesses: workerProcesses)
            return standIn
        } catch {
            standIn.stop()
            throw error
        }
    }

    private init(directory: String, port: Int) {
        self.directory = directory
        self.port = port
    }

    private var configurationPath: String { "\(directory)/nginx.conf" }
    private var pidPath: String { "\(directory)/nginx.pid" }
    public var errorLogPath: String { "\(directory)/error.log" }

    private func launch(executable: String, certificatePath: String, keyPath: String, workerProcesses: Int) throws {
        try configuration(certificatePath: certificatePath, keyPath: keyPath, workerProcesses: workerProcesses)
            .write(toFile: configurationPath, atomically: true, encoding: .utf8)
        let status = try spawnAndWait(
            executable: executable, arguments: ["nginx", "-p", directory, "-c", configurationPath], outputPath: "\(directory)/start.log")
        guard status == 0 else {
            let log = (try? String(contentsOfFile: "\(directory)/start.log", encoding: .utf8)) ?? ""
            throw PGPushError(.invalidConfiguration, "nginx failed to start (exit \(status)): \(log.suffix(2000))")
        }
        lock.withLock { running = true }
        let deadline = Date().addingTimeInterval(10)
        while !loopbackPortAccepts(port) {
            guard Date() < deadline else { throw PGPushError(.invalidConfiguration, "nginx did not listen on \(port)") }
            usleep(20_000)
        }
    }

    private func configuration(certificatePath: String, keyPath: String, workerProcesses: Int) -> String {
        // Long-lived connections as APNs keeps them: nginx's defaults would end each after 1,000 requests
        // (keepalive_requests) or 3 minutes (keepalive_timeout) with a GOAWAY, which APNs does not do.
        // Up to 1,000 streams a connection as APNs takes them: nginx finds a stream by walking a chain of a
        // hash table of `http2_streams_index_size` buckets (default 32), so past about 200 streams a
        // connection its answers slowed fivefold (h2load -c4 -m250: 16,000–18,000 requests/s against
        // 85,000–105,000 at -m100). 8,192 buckets keep it as fast at 250 streams a connection as at 100.
        """
        \(getuid() == 0 ? "user nobody nogroup;" : "")
        worker_processes \(max(workerProcesses, 1));
        pid \(pidPath);
        error_log \(errorLogPath) warn;
        events { worker_connections 1024; }
        http {
            access_log off;
            client_body_temp_path \(directory)/body;
            proxy_temp_path \(directory)/proxy;
            fastcgi_temp_path \(directory)/fastcgi;
            uwsgi_temp_path \(directory)/uwsgi;
            scgi_temp_path \(directory)/scgi;
            keepalive_requests 1000000000;
            keepalive_timeout 3600s;
            http2_max_concurrent_streams 1000;
            http2_streams_index_size 8192;
            default_type application/json;
            server {
                listen 127.0.0.1:\(port) ssl http2;
                ssl_certificate \(certificatePath);
                ssl_certificate_key \(keyPath);
                # The body is read before the answer, as APNs reads it: `mirror` reads it first (to a subrequest
                # that does nothing), stub_status refuses the POST with 405, and error_page turns that into the
                # 200. A plain `return 200` answers on the HEADERS frame and resets every stream whose DATA has
                # not arrived yet (RST_STREAM NO_ERROR), a pattern APNs never shows and HTTP/2 clients limit.
                location / {
                    mirror /read-body;
                    mirror_request_body on;
                    stub_status;
                    error_page 405 =200 @answer;
                }
                location = /read-body { internal; return 204; }
                location @answer { return 200; }
            }
        }

        """
    }

    /// Stops nginx and removes its directory. Safe to call twice.
    public func stop() {
        let wasRunning = lock.withLock { () -> Bool in
            defer { running = false }
            return running
        }
        if wasRunning { terminateDaemon(pidFile: pidPath) }
        try? FileManager.default.removeItem(atPath: directory)
    }
}
