// swift-tools-version:6.1
import PackageDescription

// Dependencies point one way:
//   PGPushCore ← PGPushTransport / PGPushStore ← PGPushDispatcher ← pgpush (PGPushCLI)
//   PGPushCore ← PGPushSimulator ← pgpush (PGPushCLI) and the tests
//   PGPushStore ← PGPushDevelopment ← PGPushBench ← pgpush (PGPushCLI); PGPushDevelopment ← the tests
//   PGPushStore ← PGPushDashboard (Hummingbird) ← pgpush (PGPushCLI)
//   PGPushStore ← PGPushCLISupport ← PGPushBench and pgpush (PGPushCLI)
// The core imports neither NIO nor PostgresNIO. PGPushTransport is the provider-neutral HTTP/2 client
// (connection, pool, stream dispatcher, TLS, credentials); its Providers/APNs and Providers/FCM folders
// hold what is particular to each provider (request building, token rejection, the OAuth exchange).
// PGPushDevelopment holds the development tools (throwaway PostgreSQL and PgBouncer, the bench rig's
// statements). PGPushBench (`pgpush bench`, `pgpush demo` and their rigs) is the only module that uses it; the
// pgpush executable links PGPushBench, so both are in the binary the workers run, and no other command calls
// them. PGPushClient, the producers' Swift client of the SQL API, stands alone: it links PostgresNIO and
// Logging and nothing of pgpush.

/// Every file in Migrations/, in order. A new migration is added here as well.
let migrationFiles = [
    "0001_schema.sql",
    "0002_producer_api.sql",
    "0003_views.sql",
    "0004_partitions.sql",
    "0005_roles.sql",
    "0006_scheduler.sql",
    "0007_app_valve.sql",
    "0008_tenancy.sql",
    "0009_fcm_schema.sql",
    "0010_fcm_sending.sql",
    "0011_job_platforms.sql",
    "0012_one_enqueue_trigger.sql",
    "0013_device_field_bounds.sql",
    "0014_chunks_without_job_key.sql",
    "0015_pooled_topology.sql",
    "0016_job_audience.sql",
    "0017_live_activities.sql",
    "0018_dashboard_roles.sql",
    "0019_dashboard_grants.sql",
    "0020_cheaper_enqueue.sql",
    "0021_large_job_look.sql",
    "0022_enqueue_fast_path.sql",
    "0023_per_device_content.sql",
    "0024_labels_replace_resend.sql",
    "0025_job_events.sql",
    "0026_dashboard_resend.sql",
    "0027_web_push.sql",
    "0028_broadcast_controls.sql",
]

let package = Package(
    name: "pgpush",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "pgpush", targets: ["PGPushCLI"]),
        .library(name: "PGPushCore", targets: ["PGPushCore"]),
        .library(name: "PGPushTransport", targets: ["PGPushTransport"]),
        .library(name: "PGPushSimulator", targets: ["PGPushSimulator"]),
        .library(name: "PGPushStore", targets: ["PGPushStore"]),
        .library(name: "PGPushDispatcher", targets: ["PGPushDispatcher"]),
        .library(name: "PGPushClient", targets: ["PGPushClient"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        // The simulator mints its own CA and server certificate; swift-certificates does X.509 properly.
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        // The dashboard's HTTP server: Hummingbird runs as a service-lifecycle Service on the NIO we already
        // link. Its default traits are off: swift-configuration is not needed and only lengthens the build.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.0.0", traits: []),
        // The webhook relay's HTTP/1.1 client (TLS verified as usual, timeouts, pooled keep-alive connections);
        // Web Push needs an HTTP/1.1 client too. Hummingbird already brings it into Package.resolved.
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
    ],
    targets: [
        // libnghttp2, the HTTP/2 engine h2load runs on, as a second engine for the transport under NIO SSL
        // (``HTTP2Engine``). Found with pkg-config; Debian 12 ships 1.52.
        .systemLibrary(
            name: "CNGHTTP2", path: "Sources/CNGHTTP2", pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"]), .brew(["nghttp2"])]
        ),
        .target(
            name: "PGPushCore",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                // RSA (RS256) for FCM's service-account assertions.
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ]
        ),
        .target(
            name: "PGPushTransport",
            dependencies: [
                "PGPushCore",
                "CNGHTTP2",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                // The HTTP proxy's CONNECT handshake (Connection/HTTPConnectTunnel.swift).
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "PGPushSimulator",
            dependencies: [
                "PGPushCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                // Web Push over HTTP/1.1 (WebPush/WebPushHTTP1Handler.swift).
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                // RSA public keys of the service accounts the FCM simulator trusts.
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "PGPushStore",
            dependencies: [
                "PGPushCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            // The SQL files of Migrations/ (symlinked here) are compiled into the binary, so `pgpush migrate`
            // needs nothing beside the executable.
            // Migrations/current/ is a generated reading copy of the schema (scripts/current-schema), not a migration.
            exclude: ["Migrations/current"],
            resources: migrationFiles.map { .embedInCode("Migrations/\($0)") }
        ),
        .target(
            name: "PGPushDevelopment",
            dependencies: [
                "PGPushCore",
                "PGPushStore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .target(
            name: "PGPushDispatcher",
            dependencies: [
                "PGPushCore",
                "PGPushTransport",
                "PGPushStore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // The webhook relay: its HTTP client and its HMAC-SHA256 signatures.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .target(
            name: "PGPushDashboard",
            dependencies: [
                "PGPushCore",
                "PGPushStore",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            // The producers' Swift client of the SQL API, for a backend that already holds a PostgresClient: it
            // links PostgresNIO and Logging only, none of the worker, the transport or the simulators.
            name: "PGPushClient",
            dependencies: [
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            // What the operator commands and the rigs both print and connect with: tables, JSON output, job
            // progress lines, and the one mapping of a failed database connection to a message.
            name: "PGPushCLISupport",
            dependencies: [
                "PGPushStore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            // `pgpush bench …` and `pgpush demo`: the benches (Bench/), the demo (Demo/) and the rigs they run on
            // (Embedded/: a broadcast end to end with `pgpush worker` child processes). PGPushCLI registers
            // BenchCommand and DemoCommand; nothing else is public.
            name: "PGPushBench",
            dependencies: [
                "PGPushCore",
                "PGPushTransport",
                "PGPushSimulator",
                "PGPushStore",
                "PGPushDevelopment",
                "PGPushCLISupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                // The FCM service account the broadcast rig mints (an RSA key).
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            // The operator commands (Commands/), `pgpush simulator`, and the registration of PGPushBench's.
            name: "PGPushCLI",
            dependencies: [
                "PGPushCore",
                "PGPushDashboard",
                "PGPushTransport",
                "PGPushSimulator",
                "PGPushStore",
                "PGPushDispatcher",
                "PGPushBench",
                "PGPushCLISupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .target(
            name: "PGPushTestSupport",
            dependencies: [
                "PGPushCore",
                "PGPushStore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/PGPushTestSupport"
        ),
        .target(
            // Fakes for testing the worker without PostgreSQL or sockets, as HummingbirdTesting ships beside
            // Hummingbird: an in-memory WorkerStore, a fake connection pool and sender source, a test clock.
            name: "PGPushDispatcherTesting",
            dependencies: [
                "PGPushCore", "PGPushStore", "PGPushTransport", "PGPushDispatcher",
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ]
        ),
        .testTarget(
            name: "PGPushCoreTests",
            dependencies: [
                "PGPushCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            name: "PGPushTransportTests",
            dependencies: [
                "PGPushCore", "PGPushTransport", "PGPushSimulator",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                // The Web Push simulator's tests send as a sender does, over HTTP/2 and HTTP/1.1.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
        .testTarget(
            name: "PGPushStoreTests",
            dependencies: [
                "PGPushCore", "PGPushStore", "PGPushDevelopment", "PGPushTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "PGPushDispatcherTests",
            dependencies: [
                "PGPushCore", "PGPushTransport", "PGPushSimulator", "PGPushStore", "PGPushDispatcher", "PGPushDevelopment",
                "PGPushTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // The tests' own HTTP CONNECT proxy (Support/ConnectProxy.swift).
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                // The webhook relay tests' receiver (plain and TLS).
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        .testTarget(
            name: "PGPushDashboardTests",
            dependencies: [
                "PGPushStore", "PGPushDashboard", "PGPushTestSupport", "PGPushDispatcher", "PGPushSimulator",
                "PGPushDevelopment",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "PGPushClientTests",
            dependencies: [
                "PGPushClient", "PGPushTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "PGPushCLITests",
            dependencies: [
                "PGPushStore", "PGPushTestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ]
        ),
        .testTarget(
            // The worker and the chunk processor in-process, on PGPushDispatcherTesting's fakes (fast tier).
            name: "PGPushWorkerTests",
            dependencies: [
                "PGPushCore", "PGPushStore", "PGPushTransport", "PGPushDispatcher", "PGPushDispatcherTesting",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
            ]
        ),
    ]
)
