import PGPushTestSupport
import PostgresNIO
import Testing

/// Creating a delivery partition locks push.deliveries, and a hot standby replays that lock against its
/// reports; so partitions come four weeks at a time, and a maintenance pass with the days ahead in place
/// takes no lock at all.
@Suite(.database, .timeLimit(.minutes(1)))
struct PartitionTests {
    @Test func partitionsAreMadeFourWeeksAheadAndOnlyWhenTheNextDaysAreMissing() async throws {
        try await TestDatabase.with { db in
            let partitions = PostgresQuery(unsafeSQL: "SELECT count(*) FROM pg_inherits WHERE inhparent = 'push.deliveries'::regclass AND inhrelid::regclass::text LIKE 'push.deliveries_2%'")
            #expect(try await db.scalar(partitions) == 4, "today and 3 days ahead, made by the first migration")
            #expect(try await db.scalar("SELECT push.ensure_delivery_partitions(3)") == 0, "nothing missing, nothing locked")
            try await db.exec(PostgresQuery(unsafeSQL: """
                DO $$ BEGIN
                    EXECUTE format('DROP TABLE push.%I', 'deliveries_' || to_char((now() AT TIME ZONE 'UTC')::date + 2, 'YYYYMMDD'));
                END $$
                """))
            #expect(try await db.scalar("SELECT push.ensure_delivery_partitions(3)") == 29, "the missing day and days 4 to 31")
            #expect(try await db.scalar(partitions) == 32)
            #expect(try await db.scalar("SELECT push.ensure_delivery_partitions(3)") == 0)
            let beyond = try await db.scalar(
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'push.deliveries'::regclass AND inhrelid::regclass::text = 'push.deliveries_' || to_char((now() AT TIME ZONE 'UTC')::date + 31, 'YYYYMMDD')")
            #expect(beyond == 1)
        }
    }
}
