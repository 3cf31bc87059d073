import Foundation
import Testing

/// The test tiers (README, "Test tiers").
///
/// A test with neither trait below is in the fast tier: it needs no PostgreSQL, opens no socket and starts no
/// process, and `scripts/test --fast` runs it (as does a plain `swift test`). A suite or test that needs more
/// says so with `.database` or `.network`; it runs under `scripts/test`, which sets `PGPUSH_TEST_TIER=full`,
/// and anywhere else it is reported as skipped with the reason. Under `scripts/test` nothing may be skipped:
/// the script fails the run if anything was, and a missing database fails the tests that need it.
public enum TestTier {
    /// True under `scripts/test` (everything), false under `scripts/test --fast` and a plain `swift test`.
    public static var isFull: Bool { ProcessInfo.processInfo.environment["PGPUSH_TEST_TIER"] == "full" }
}

extension Trait where Self == ConditionTrait {
    /// Needs the throwaway PostgreSQL (and PgBouncer) that `scripts/test` starts.
    public static var database: Self {
        .enabled(if: TestTier.isFull, "needs PostgreSQL: run it with scripts/test")
    }

    /// Opens sockets (the simulators, TLS, HTTP) or starts processes (the CLI, a worker, Python), but needs no
    /// database.
    public static var network: Self {
        .enabled(if: TestTier.isFull, "opens sockets or starts processes: run it with scripts/test")
    }
}
