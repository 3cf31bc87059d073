import Foundation
import Testing

// The `.network` trait of the test tiers (README, "Test tiers"), as PGPushTestSupport defines it; this target
// does not depend on that module. A suite that opens sockets or starts processes carries it and runs under
// `scripts/test` only; every other test here is in the fast tier.
extension Trait where Self == ConditionTrait {
    static var network: Self {
        .enabled(if: ProcessInfo.processInfo.environment["PGPUSH_TEST_TIER"] == "full",
                 "opens sockets or starts processes: run it with scripts/test")
    }
}
