import Foundation
import PGPushStore
import PGPushTestSupport
import PostgresNIO
import Testing

/// Per-device content (migration 0023): a device's locale and badge counter, the localized variants and badge
/// increments of a job checked and resolved at enqueue, opens, and push.job_engagement.
@Suite(.database, .timeLimit(.minutes(3)))
struct PerDeviceContentTests {
    static let fcmToken = "fYK3abcdEFGH:APA91bHqwe-_rty0123456789"
    /// PL/pgSQL's `no_data_found` (not SQL's `no_data`, 02000): an unknown job, apns-id or device.
    static let noDataFound = "P0002"

    /// An app with APNs only ("app") and one with APNs and FCM ("dual").
    static func createApps(_ db: TestDatabase) async throws {
        try await db.createApp("app")
        try await db.exec("""
            INSERT INTO push.apps (id, topic, team_id, key_id, private_key_path, fcm_project_id, fcm_service_account_path)
            VALUES ('dual', 'com.example.dual', 'TEAM123456', 'KEY1234567', 'dual.p8', 'demo-project', 'dual-sa.json')
            """)
    }

    /// A valid FCM registration token of its own for each index.
    static func androidToken(_ index: Int) -> String {
        "fcm\(index):APA91bHqwe-_rty0123456789"
    }

    /// A device's locale and badge counter, or nil when the app has no such token.
    static func device(_ db: TestDatabase, _ app: String, _ token: String) async throws -> (locale: String?, badge: Int)? {
        let rows = try await db.rows("SELECT locale, badge FROM push.devices WHERE app_id = \(app) AND token = \(token)")
        for try await (locale, badge) in rows.decode((String?, Int).self) { return (locale, badge) }
        return nil
    }

    /// Runs a statement that must be refused, and returns the server's error.
    static func refusal(
        _ db: TestDatabase, _ statement: String, sourceLocation: SourceLocation = #_sourceLocation
    ) async -> PSQLError? {
        do {
            try await db.exec(PostgresQuery(unsafeSQL: statement))
            Issue.record("accepted: \(statement)", sourceLocation: sourceLocation)
        } catch let error as PSQLError {
            return error
        } catch {
            Issue.record("\(statement): \(error)", sourceLocation: sourceLocation)
        }
        return nil
    }

    /// Expects `statement` to be refused with `sqlState`, naming `column` in the error's COLUMN field and
    /// saying `mentioning` in its message.
    static func expectRefused(
        _ db: TestDatabase, _ statement: String, column: String, sqlState: String = "23514", mentioning: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async {
        let error = await refusal(db, statement, sourceLocation: sourceLocation)
        guard let error else { return }
        let message = error.serverInfo?[.message] ?? "\(error)"
        #expect(error.serverInfo?[.columnName] == column,
                "COLUMN is \(error.serverInfo?[.columnName] ?? "nil"), not \(column): \(message) ← \(statement)", sourceLocation: sourceLocation)
        #expect(error.serverInfo?[.sqlState] == sqlState,
                "SQLSTATE is \(error.serverInfo?[.sqlState] ?? "nil"), not \(sqlState): \(message) ← \(statement)", sourceLocation: sourceLocation)
        #expect(message.contains(mentioning), "\(message) does not say \(mentioning) ← \(statement)", sourceLocation: sourceLocation)
    }

    /// Expects the jsonb at `path` of a job's `column` to equal `expected` (JSON text); shows what it is otherwise.
    static func expectJSON(
        _ db: TestDatabase, job: Int64, _ column: String, _ path: [String], _ expected: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let rows = try await db.rows("""
            SELECT (\(unescaped: column) #> \(path))::text, coalesce((\(unescaped: column) #> \(path)) = \(expected)::jsonb, false)
              FROM push.jobs WHERE id = \(job)
            """)
        var found = false
        for try await (actual, equal) in rows.decode((String?, Bool).self) {
            found = true
            #expect(equal, "\(column) #> \(path) is \(actual ?? "absent"), not \(expected)", sourceLocation: sourceLocation)
        }
        #expect(found, "no job \(job)", sourceLocation: sourceLocation)
    }

    // MARK: devices: locale and badge

    @Test func aDevicesLocaleIsKeptAsALowercaseBCP47Tag() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            for (index, (given, stored)) in [
                ("fr_CA", "fr-ca"), ("fr-CA", "fr-ca"), ("fr", "fr"), ("EN", "en"), ("zh-Hant-TW", "zh-hant-tw"),
                ("zh_Hant_TW", "zh-hant-tw"), ("gsw", "gsw"), (" pt_BR ", "pt-br"), ("es-419", "es-419"),
            ].enumerated() {
                let token = TestTokens.token(index)
                try await db.exec("SELECT push.register_device('app', \(token), locale => \(given))")
                #expect(try await Self.device(db, "app", token)?.locale == stored, "\(given)")
            }
            // Without a locale a device has none, and its counter starts at 0.
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(99)))")
            let plain = try #require(try await Self.device(db, "app", TestTokens.token(99)))
            #expect(plain.locale == nil && plain.badge == 0)
        }
    }

    @Test func aMalformedLocaleIsRefusedNamingTheFieldAndLeavesNoDevice() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            for locale in ["not a locale", "f", "english", "", "fr-", "fr--ca", "-fr", "12", "fr-ca!", "fr-toolongtag",
                           "fr.CA", "fr@euro", "fr-" + String(repeating: "ab-", count: 12) + "ab", "fr\u{00e9}"] {
                await Self.expectRefused(
                    db, "SELECT push.register_device('app', '\(TestTokens.token(1))', locale => '\(locale)')",
                    column: "locale", mentioning: "is not a BCP 47 language tag")
            }
            // Refused on re-registration too, and the device keeps what it had.
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(2)), locale => 'de')")
            await Self.expectRefused(
                db, "SELECT push.register_device('app', '\(TestTokens.token(2))', locale => 'deutsch')",
                column: "locale", mentioning: "is not a BCP 47 language tag")
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 1)
            #expect(try await Self.device(db, "app", TestTokens.token(2))?.locale == "de")
        }
    }

    @Test func aReRegistrationKeepsTheLocaleUnlessItGivesOneAndAlwaysKeepsTheBadge() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let token = TestTokens.token(1)
            try await db.exec("SELECT push.register_device('app', \(token), user_id => 'u1', locale => 'fr_CA')")
            #expect(try await db.scalar("SELECT push.set_badge('app', token => \(token), value => 4)::int8") == 1)

            try await db.exec("SELECT push.register_device('app', \(token.uppercased()), user_id => 'u2', tags => '{news}')")
            var device = try #require(try await Self.device(db, "app", token))
            #expect(device.locale == "fr-ca")
            #expect(device.badge == 4)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices WHERE user_id = 'u2' AND tags = '{news}'") == 1)

            try await db.exec("SELECT push.register_device('app', \(token), user_id => 'u2', locale => 'de-DE')")
            device = try #require(try await Self.device(db, "app", token))
            #expect(device.locale == "de-de")
            #expect(device.badge == 4)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 1)
        }
    }

    @Test func replacesCarriesTheBadgeAndTheLocaleToTheNewToken() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            // The new token is registered without a locale: it takes the old one's.
            let (old, new) = (TestTokens.token(1), TestTokens.token(2))
            try await db.exec("SELECT push.register_device('app', \(old), user_id => 'u1', locale => 'fr_CA')")
            try await db.exec("SELECT push.set_badge('app', token => \(old), value => 7)")
            try await db.exec("SELECT push.register_device('app', \(new), user_id => 'u1', replaces => \(old.uppercased()))")
            #expect(try await Self.device(db, "app", old) == nil)
            var device = try #require(try await Self.device(db, "app", new))
            #expect(device.locale == "fr-ca")
            #expect(device.badge == 7)

            // A locale given with the new token is the one kept; the badge still comes along.
            let newer = TestTokens.token(3)
            try await db.exec("SELECT push.register_device('app', \(newer), user_id => 'u1', replaces => \(new), locale => 'en-GB')")
            device = try #require(try await Self.device(db, "app", newer))
            #expect(device.locale == "en-gb")
            #expect(device.badge == 7)

            // The same on Android, where tokens are kept as given.
            let (oldAndroid, newAndroid) = (Self.androidToken(1), Self.androidToken(2))
            try await db.exec("SELECT push.register_device('dual', \(oldAndroid), platform => 'android', locale => 'pt_BR')")
            try await db.exec("SELECT push.set_badge('dual', token => \(oldAndroid), value => 2)")
            try await db.exec("SELECT push.register_device('dual', \(newAndroid), platform => 'android', replaces => \(oldAndroid))")
            #expect(try await Self.device(db, "dual", oldAndroid) == nil)
            device = try #require(try await Self.device(db, "dual", newAndroid))
            #expect(device.locale == "pt-br")
            #expect(device.badge == 2)
            #expect(try await db.scalar("SELECT count(*) FROM push.devices") == 2)

            // A Live Activity's rotated update token is the same activity: it keeps its locale.
            let (firstUpdate, rotated) = (TestTokens.token(11), TestTokens.token(12))
            try await db.exec("SELECT push.register_device('app', \(firstUpdate), token_kind => 'activity', activity_id => 'm1', locale => 'fr')")
            try await db.exec("SELECT push.register_device('app', \(rotated), token_kind => 'activity', activity_id => 'm1')")
            #expect(try await Self.device(db, "app", firstUpdate) == nil)
            #expect(try #require(try await Self.device(db, "app", rotated)).locale == "fr")
        }
    }

    // MARK: enqueue: localized and badge

    @Test func badLocalizedOrBadgeIsRefusedNamingTheFieldAndTheVariantAndLeavesNoJob() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let alert = #"'{"aps":{"alert":"Hello","sound":"default"}}'"#
            let live = #"'{"aps":{"timestamp":1767225600,"event":"update","content-state":{"score":"2-1"}}}'"#
            let cases: [(statement: String, column: String, mentioning: String)] = [
                // A variant over APNs' limit once merged over the job's payload (5120 bytes for VoIP).
                ("SELECT push.enqueue('app', \(alert), localized => jsonb_build_object('fr', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 4100)))))",
                 "localized", #"localized."fr": the merged payload is"#),
                ("SELECT push.enqueue('app', \(alert), localized => jsonb_build_object('de', '{}'::jsonb, 'fr-CA', jsonb_build_object('big', repeat('x', 4080))))",
                 "localized", #"localized."fr-CA": the merged payload is"#),
                ("SELECT push.enqueue('app', \(alert), push_type => 'voip', localized => jsonb_build_object('fr', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 5200)))))",
                 "localized", "5120-byte limit"),
                // Fits alone, but not with the badge's place in it.
                ("SELECT push.enqueue('app', \(alert), badge => 'increment', localized => jsonb_build_object('fr', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 4050)))))",
                 "localized", #"localized."fr": the merged payload is"#),
                // Keys must be locales, and one per locale.
                (#"SELECT push.enqueue('app', \#(alert), localized => '{"not a locale":{"aps":{"alert":"x"}}}')"#,
                 "localized", "localized key 'not a locale' is not a locale"),
                (#"SELECT push.enqueue('app', \#(alert), localized => '{"fr":{},"":{"aps":{"alert":"x"}}}')"#,
                 "localized", "localized key '' is not a locale"),
                (#"SELECT push.enqueue('app', \#(alert), localized => '{"fr_CA":{},"fr-ca":{}}')"#,
                 "localized", #"two variants for locale "fr-ca""#),
                // localized is an object of objects.
                (#"SELECT push.enqueue('app', \#(alert), localized => '["fr"]')"#, "localized", "localized must be a JSON object"),
                (#"SELECT push.enqueue('app', \#(alert), localized => '"fr"')"#, "localized", "localized must be a JSON object"),
                ("SELECT push.enqueue('app', \(alert), localized => 'null')", "localized", "localized must be a JSON object"),
                (#"SELECT push.enqueue('app', \#(alert), localized => '{"fr":"Bonjour"}')"#,
                 "localized", #"localized."fr" must be a JSON object"#),
                (#"SELECT push.enqueue('app', \#(alert), localized => '{"de":{},"fr":["Bonjour"]}')"#,
                 "localized", #"localized."fr" must be a JSON object"#),
                (#"SELECT push.enqueue('app', \#(alert), localized => '{"fr":{"aps":null}}')"#,
                 "localized", #"localized."fr": the merged payload has no "aps" dictionary"#),
                (#"SELECT push.enqueue('app', \#(alert), localized => '{"fr":{"web":{"title":"x"}}}')"#,
                 "localized", #"localized."fr".web is a Web Push message"#),
                // An Android message in a variant needs one in the job.
                (#"SELECT push.enqueue('app', \#(alert), localized => '{"fr":{"fcm":{"notification":{"body":"Bonjour"}}}}')"#,
                 "localized", #"localized."fr".fcm is given, but the job has no Android message"#),
                // FCM's rules, inside a variant, name the variant.
                (#"SELECT push.enqueue('dual', \#(alert), localized => '{"de":{"fcm":{"data":{"n":1}}}}')"#,
                 "localized", #"localized."de": fcm.data.n must be a string"#),
                (#"SELECT push.enqueue('dual', \#(alert), fcm => '{"notification":{"body":"Hello"}}', localized => '{"fr":{},"es":{"fcm":{"android":{"priority":"URGENT"}}}}')"#,
                 "localized", #"localized."es": "#),
                // badge is 'increment' or nothing.
                ("SELECT push.enqueue('app', \(alert), badge => 'decrement')", "badge", "badge 'decrement' is not valid"),
                ("SELECT push.enqueue('app', \(alert), badge => '')", "badge", "badge '' is not valid"),
                (#"INSERT INTO push.jobs (app_id, payload, badge) VALUES ('app', \#(alert), 'INCREMENT')"#, "badge", "is not valid"),
                // The job's own payload must hold the badge's place too.
                ("SELECT push.enqueue('app', jsonb_build_object('aps', jsonb_build_object('alert', repeat('x', 4062))), badge => 'increment')",
                 "payload", "with a badge counter in it, over APNs' 4096-byte limit"),
                // A Live Activity has no badge, and what makes it start, update or end is the same in every language.
                ("SELECT push.enqueue('app', \(live), push_type => 'liveactivity', activity_ids => '{m}', badge => 'increment')",
                 "badge", "badge is not for push_type liveactivity"),
                (#"SELECT push.enqueue('app', \#(live), push_type => 'liveactivity', activity_ids => '{m}', localized => '{"fr":{"aps":{"event":"end"}}}')"#,
                 "localized", #"localized."fr".aps.event differs from the job's"#),
            ]
            for (statement, column, mentioning) in cases {
                await Self.expectRefused(db, statement, column: column, mentioning: mentioning)
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 0, "a refused enqueue left a job")

            // The same through a plain INSERT, and the variants column is the trigger's, not the producer's.
            await Self.expectRefused(
                db, #"INSERT INTO push.jobs (app_id, payload, localized) VALUES ('app', \#(alert), '{"fr":"Bonjour"}')"#,
                column: "localized", mentioning: #"localized."fr" must be a JSON object"#)
            let forged = try await db.scalar(#"""
                INSERT INTO push.jobs (app_id, payload, badge, variants) VALUES ('app', '{"aps":{}}', 'increment', '{"fr":{"apns":{"aps":{"alert":"phish"}}}}')
                RETURNING id
                """#)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(forged) AND variants IS NULL") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs") == 1)
        }
    }

    @Test func aVariantIsMergedOverTheJobsPayloadSoAnAlertOverrideKeepsTheSound() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("app")
            let job = try await db.scalar(#"""
                SELECT push.enqueue('app', '{"aps":{"alert":{"title":"Goal!","body":"2-1"},"sound":"default"},"match":"77"}',
                                    localized => '{"fr_CA":{"aps":{"alert":{"body":"2-1, but en français"}}},
                                                   "de":{"aps":{"alert":"Tor!","sound":null},"match":null}}',
                                    badge => 'increment')
                """#)
            try await Self.expectJSON(db, job: job, "localized", [], #"""
                {"fr-ca":{"aps":{"alert":{"body":"2-1, but en français"}}},"de":{"aps":{"alert":"Tor!","sound":null},"match":null}}
                """#)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE id = \(job) AND badge = 'increment'") == 1)
            // An override of alert.body keeps the title, the sound and the custom key.
            try await Self.expectJSON(db, job: job, "variants", ["fr-ca"], #"""
                {"apns":{"aps":{"alert":{"title":"Goal!","body":"2-1, but en français"},"sound":"default"},"match":"77"}}
                """#)
            // A null removes a key (RFC 7386).
            try await Self.expectJSON(db, job: job, "variants", ["de"], #"{"apns":{"aps":{"alert":"Tor!"}}}"#)
            // The job's own payload is unchanged; the badge's place is the worker's to fill.
            try await Self.expectJSON(db, job: job, "payload", [], #"{"aps":{"alert":{"title":"Goal!","body":"2-1"},"sound":"default"},"match":"77"}"#)

            // A badge alone has no variants; an empty localized is none.
            let plain = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}', badge => 'increment', localized => '{}')"#)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(plain) AND badge = 'increment' AND localized IS NULL AND variants IS NULL
                """) == 1)
            let none = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}')"#)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs WHERE id = \(none) AND badge IS NULL AND localized IS NULL AND variants IS NULL
                """) == 1)
        }
    }

    @Test func aDerivedAndroidMessageIsDerivedFromEachVariant() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let job = try await db.scalar(#"""
                SELECT push.enqueue('dual', '{"aps":{"alert":{"title":"Goal!","body":"2-1"},"sound":"default"},"match":"77"}',
                                    localized => '{"fr":{"aps":{"alert":{"body":"2-1 à la 89e"}}},
                                                   "de":{"aps":{"alert":{"title":"Tor!"}},"fcm":{"android":{"ttl":"60s"}}}}')
                """#)
            try await Self.expectJSON(db, job: job, "fcm", ["notification"], #"{"title":"Goal!","body":"2-1"}"#)
            // Each variant's Android message is what its own payload gives...
            try await Self.expectJSON(db, job: job, "variants", ["fr", "fcm", "notification"], #"{"title":"Goal!","body":"2-1 à la 89e"}"#)
            try await Self.expectJSON(db, job: job, "variants", ["fr", "fcm", "android", "notification", "sound"], #""default""#)
            try await Self.expectJSON(db, job: job, "variants", ["fr", "fcm", "data"], #"{"match":"77"}"#)
            try await Self.expectJSON(db, job: job, "variants", ["fr", "apns"], #"""
                {"aps":{"alert":{"title":"Goal!","body":"2-1 à la 89e"},"sound":"default"},"match":"77"}
                """#)
            // ...with the variant's own fcm merged over it.
            try await Self.expectJSON(db, job: job, "variants", ["de", "fcm", "notification"], #"{"title":"Tor!","body":"2-1"}"#)
            try await Self.expectJSON(db, job: job, "variants", ["de", "fcm", "android", "ttl"], #""60s""#)
            try await Self.expectJSON(db, job: job, "variants", ["de", "fcm", "android", "priority"], #""HIGH""#)
            // The derivation is the job's own, applied to the merged payload.
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.jobs j
                 WHERE j.id = \(job)
                   AND j.variants #> '{fr,fcm}' = push.validate_fcm_message(
                           push.fcm_from_apns(j.variants #> '{fr,apns}', j.push_type, j.apns_priority, j.collapse_id))
                """) == 1)
        }
    }

    @Test func anExplicitAndroidMessageIsKeptAndTheVariantsFCMIsMergedOverIt() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let job = try await db.scalar(#"""
                SELECT push.enqueue('dual', '{"aps":{"alert":"Hello","sound":"default"}}',
                                    fcm => '{"notification":{"title":"Hi","body":"Hello"},"data":{"k":"v"},"android":{"ttl":"60s"}}',
                                    localized => '{"fr-CA":{"aps":{"alert":"Bonjour"},"fcm":{"notification":{"body":"Bonjour"},"data":{"lang":"fr"}}},
                                                   "de":{"aps":{"alert":"Hallo"}}}')
                """#)
            try await Self.expectJSON(db, job: job, "variants", ["fr-ca"], #"""
                {"apns":{"aps":{"alert":"Bonjour","sound":"default"}},
                 "fcm":{"notification":{"title":"Hi","body":"Bonjour"},"data":{"k":"v","lang":"fr"},"android":{"ttl":"60s"}}}
                """#)
            // A variant without fcm sends the job's explicit Android message as it is: it was not derived from the alert.
            try await Self.expectJSON(db, job: job, "variants", ["de"], #"""
                {"apns":{"aps":{"alert":"Hallo","sound":"default"}},
                 "fcm":{"notification":{"title":"Hi","body":"Hello"},"data":{"k":"v"},"android":{"ttl":"60s"}}}
                """#)
        }
    }

    // MARK: push.set_badge

    @Test func setBadgeSetsOneTokenOrEveryDeviceOfAUser() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            try await db.exec("SELECT push.register_device('dual', \(TestTokens.token(1)), user_id => 'u1')")
            try await db.exec("SELECT push.register_device('dual', \(Self.fcmToken), user_id => 'u1', platform => 'android')")
            try await db.exec("SELECT push.register_device('dual', \(TestTokens.token(2)), user_id => 'u2')")
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(1)), user_id => 'u1')")

            #expect(try await db.scalar("SELECT push.set_badge('dual', user_id => 'u1', value => 3)::int8") == 2)
            #expect(try await Self.device(db, "dual", TestTokens.token(1))?.badge == 3)
            #expect(try await Self.device(db, "dual", Self.fcmToken)?.badge == 3)
            #expect(try await Self.device(db, "dual", TestTokens.token(2))?.badge == 0)
            #expect(try await Self.device(db, "app", TestTokens.token(1))?.badge == 0, "another app's device of the same user")

            // By token (an APNs token in any case); the default value clears the badge.
            #expect(try await db.scalar("SELECT push.set_badge('dual', token => \(TestTokens.token(2).uppercased()), value => 5)::int8") == 1)
            #expect(try await Self.device(db, "dual", TestTokens.token(2))?.badge == 5)
            #expect(try await db.scalar("SELECT push.set_badge('dual', token => \(Self.fcmToken))::int8") == 1)
            #expect(try await Self.device(db, "dual", Self.fcmToken)?.badge == 0)
            // A user without devices has nothing to set.
            #expect(try await db.scalar("SELECT push.set_badge('dual', user_id => 'nobody')::int8") == 0)

            await Self.expectRefused(db, "SELECT push.set_badge('dual', token => '\(TestTokens.token(9))')",
                                     column: "token", sqlState: Self.noDataFound, mentioning: "unknown device")
            await Self.expectRefused(db, "SELECT push.set_badge('app', token => '\(TestTokens.token(2))')",
                                     column: "token", sqlState: Self.noDataFound, mentioning: "unknown device")
            await Self.expectRefused(db, "SELECT push.set_badge('dual')", column: "token", mentioning: "give either token or user_id")
            await Self.expectRefused(db, "SELECT push.set_badge('dual', token => '\(TestTokens.token(1))', user_id => 'u1')",
                                     column: "user_id", mentioning: "give either token or user_id")
            await Self.expectRefused(db, "SELECT push.set_badge('dual', token => '\(TestTokens.token(1))', value => -1)",
                                     column: "value", mentioning: "value must be 0 or more")
            await Self.expectRefused(db, "SELECT push.set_badge('ghost', user_id => 'u1')",
                                     column: "app_id", sqlState: "23503", mentioning: "unknown app_id: ghost")
            #expect(try await db.scalar("SELECT sum(badge)::int8 FROM push.devices") == 8)
        }
    }

    // MARK: push.record_open

    @Test func recordOpenByJobIDOrAPNsIDKeepsOneOpenPerJobAndDevice() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            let (ios, delivered) = (TestTokens.token(1), TestTokens.token(2))
            try await db.exec("SELECT push.register_device('dual', \(ios))")
            try await db.exec("SELECT push.register_device('dual', \(Self.fcmToken), platform => 'android')")
            try await db.exec("SELECT push.register_device('dual', \(delivered))")
            let job = try await db.scalar(#"SELECT push.enqueue('dual', '{"aps":{"alert":"x"}}')"#)

            let opens: PostgresQuery = "SELECT count(*) FROM push.opens WHERE job_id = \(job)"
            #expect(try await db.scalar("SELECT push.record_open('dual', \(ios), job_id => \(job))::int") == 1)
            #expect(try await db.scalar("SELECT push.record_open('dual', \(ios.uppercased()), job_id => \(job))::int") == 0)
            #expect(try await db.scalar(opens) == 1)
            #expect(try await db.scalar("SELECT push.record_open('dual', \(Self.fcmToken), job_id => \(job), opened_at => now() - interval '5 min')::int") == 1)

            // A delivery as a worker writes it, named by its apns-id.
            let apnsID = UUID()
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, apns_id, attempt, sent_at, platform)
                VALUES (\(job), 'dual', \(delivered), 200, \(apnsID), 1, now(), 'ios')
                """)
            #expect(try await db.scalar("SELECT push.record_open('dual', \(delivered), apns_id => \(apnsID))::int") == 1)
            #expect(try await db.scalar("SELECT push.record_open('dual', \(delivered), apns_id => \(apnsID))::int") == 0)
            #expect(try await db.scalar("SELECT push.record_open('dual', \(delivered), job_id => \(job))::int") == 0, "the same open")
            #expect(try await db.scalar(opens) == 3)
            #expect(try await db.scalar("""
                SELECT count(*) FROM push.opens
                 WHERE job_id = \(job) AND app_id = 'dual'
                   AND ((token = \(ios) AND platform = 'ios') OR (token = \(delivered) AND platform = 'ios')
                        OR (token = \(Self.fcmToken) AND platform = 'android' AND opened_at < now() - interval '4 min'))
                """) == 3)

            // A device gone since it was sent the job can still report the open.
            let pruned = TestTokens.token(3)
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, apns_id, attempt, sent_at, platform)
                VALUES (\(job), 'dual', \(pruned), 200, gen_random_uuid(), 1, now(), 'ios')
                """)
            #expect(try await db.scalar("SELECT push.record_open('dual', \(pruned), job_id => \(job))::int") == 1)
            #expect(try await db.scalar(opens) == 4)
        }
    }

    @Test func recordOpenRefusesUnknownJobsOtherAppsJobsUnknownAPNsIDsAndUnknownDevices() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            try await db.exec("SELECT push.register_device('app', \(TestTokens.token(1)))")
            try await db.exec("SELECT push.register_device('dual', \(TestTokens.token(1)))")
            let job = try await db.scalar(#"SELECT push.enqueue('app', '{"aps":{"alert":"x"}}')"#)
            let otherAppsJob = try await db.scalar(#"SELECT push.enqueue('dual', '{"aps":{"alert":"x"}}')"#)
            let apnsID = UUID()
            try await db.exec("""
                INSERT INTO push.deliveries (job_id, app_id, token, status, apns_id, attempt, sent_at)
                VALUES (\(otherAppsJob), 'dual', \(TestTokens.token(1)), 200, \(apnsID), 1, now())
                """)
            let token = TestTokens.token(1)
            for (statement, column, mentioning) in [
                ("SELECT push.record_open('app', '\(token)', job_id => \(otherAppsJob + 1000))", "job_id", "unknown job_id"),
                ("SELECT push.record_open('app', '\(token)', job_id => \(otherAppsJob))", "job_id", "unknown job_id \(otherAppsJob)"),
                ("SELECT push.record_open('app', '\(token)', apns_id => '\(UUID())')", "apns_id", "unknown apns_id"),
                // The apns-id of another app's delivery, or of a delivery to another device, names nothing here.
                ("SELECT push.record_open('app', '\(token)', apns_id => '\(apnsID)')", "apns_id", "unknown apns_id"),
                ("SELECT push.record_open('dual', '\(TestTokens.token(2))', apns_id => '\(apnsID)')", "apns_id", "unknown apns_id"),
                ("SELECT push.record_open('app', '\(TestTokens.token(2))', job_id => \(job))", "token", "unknown device"),
                ("SELECT push.record_open('app', '\(Self.fcmToken)', job_id => \(job))", "token", "unknown device"),
            ] {
                await Self.expectRefused(db, statement, column: column, sqlState: Self.noDataFound, mentioning: mentioning)
            }
            for (statement, column) in [
                ("SELECT push.record_open('app', '\(token)')", "job_id"),
                ("SELECT push.record_open('app', '\(token)', job_id => \(job), apns_id => '\(apnsID)')", "apns_id"),
                ("SELECT push.record_open('app', '\(token)', job_id => \(job), opened_at => now() + interval '1 day')", "opened_at"),
            ] {
                await Self.expectRefused(db, statement, column: column, mentioning: column)
            }
            await Self.expectRefused(db, "SELECT push.record_open('app', NULL, job_id => \(job))",
                                     column: "token", sqlState: "23502", mentioning: "token is required")
            #expect(try await db.scalar("SELECT count(*) FROM push.opens") == 0)
        }
    }

    // MARK: push.job_engagement

    @Test func jobEngagementGivesEachPlatformsOpenRateAsAFraction() async throws {
        try await TestDatabase.with { db in
            try await Self.createApps(db)
            for index in 0..<20 {
                try await db.exec("SELECT push.register_device('dual', \(TestTokens.token(index)))")
            }
            for index in 0..<10 {
                try await db.exec("SELECT push.register_device('dual', \(Self.androidToken(index)), platform => 'android')")
            }
            let job = try await db.scalar(#"SELECT push.enqueue('dual', '{"aps":{"alert":"x"}}')"#)
            let quiet = try await db.scalar(#"SELECT push.enqueue('dual', '{"aps":{"alert":"y"}}')"#)
            // What the workers' counters would say: 20 iOS devices and 10 Android devices reached.
            try await db.exec("UPDATE push.jobs SET state = 'done', total = 30, delivered = 30, android_total = 10, android_delivered = 10 WHERE id = \(job)")
            // 30% of each platform's devices open it.
            for index in 0..<6 {
                try await db.exec("SELECT push.record_open('dual', \(TestTokens.token(index)), job_id => \(job))")
            }
            for index in 0..<3 {
                try await db.exec("SELECT push.record_open('dual', \(Self.androidToken(index)), job_id => \(job))")
            }

            let rows = try await db.rows("""
                SELECT job_id, app_id, platform, delivered::int8, opened::int8, open_rate::float8, state
                  FROM push.job_engagement ORDER BY platform
                """)
            var seen: [String] = []
            for try await (jobID, app, platform, delivered, opened, rate, state)
                in rows.decode((Int64, String, String, Int64, Int64, Double?, String).self) {
                seen.append(platform)
                #expect(jobID == job && app == "dual" && state == "done")
                #expect(delivered == (platform == "ios" ? 20 : 10), "\(platform)")
                #expect(opened == (platform == "ios" ? 6 : 3), "\(platform)")
                #expect(rate == 0.3, "\(platform): \(String(describing: rate))")
            }
            #expect(seen == ["android", "ios"], "a job that sent nothing (\(quiet)) has no row")
        }
    }

    // MARK: tenancy and roles

    @Test func aLoginGrantedOneAppCannotRecordOpensOrSetBadgesOfAnotherAndDoesNotSeeItsEngagement() async throws {
        try await TestDatabase.with { db in
            let jobs = try await TenancyTests.twoApps(db)
            try await db.exec("UPDATE push.jobs SET delivered = 1")
            try await db.exec("SELECT push.record_open('b', \(TestTokens.token(2)), job_id => \(jobs.b))")
            let user = try await db.createLogin(memberOf: "pgpush_producer")
            try await db.exec("SELECT push.grant_app(\(user), 'a')")
            let producer = try await db.connect(as: user)
            defer { Task { try? await producer.close() } }

            for sql in [
                "SELECT push.record_open('a', '\(TestTokens.token(1))', job_id => \(jobs.a))",
                "SELECT push.set_badge('a', token => '\(TestTokens.token(1))', value => 2)",
                "SELECT push.set_badge('a', user_id => 'u1', value => 2)",
            ] {
                let failure = await TenancyTests.attempt(producer, sql, db: db)
                #expect(failure == nil, "refused for its own app: \(sql): \(failure ?? "")")
            }
            for sql in [
                "SELECT push.record_open('b', '\(TestTokens.token(2))', job_id => \(jobs.b))",
                "SELECT push.record_open('b', '\(TestTokens.token(2))', apns_id => '\(UUID())')",
                "SELECT push.set_badge('b', token => '\(TestTokens.token(2))', value => 9)",
                "SELECT push.set_badge('b', user_id => 'u1', value => 9)",
                "SELECT push.register_device('b', '\(TestTokens.token(5))', locale => 'fr')",
                #"SELECT push.enqueue('b', '{"aps":{"alert":"x"}}', localized => '{"fr":{"aps":{"alert":"y"}}}', badge => 'increment')"#,
                "SELECT push.set_badge('nope', user_id => 'u1')",
            ] {
                let failure = await TenancyTests.attempt(producer, sql, db: db)
                #expect(failure?.contains("permission denied for app_id") == true, "allowed for another app: \(sql): \(failure ?? "nil")")
            }
            // Its own app with another app's job: as unknown as a job that does not exist.
            let crossed = await TenancyTests.attempt(producer, "SELECT push.record_open('a', '\(TestTokens.token(1))', job_id => \(jobs.b))", db: db)
            #expect(crossed?.contains("unknown job_id") == true, "\(crossed ?? "nil")")

            #expect(try await TenancyTests.strings(producer, "SELECT DISTINCT app_id FROM push.job_engagement", db: db) == ["a"])
            #expect(try await db.scalar("SELECT count(DISTINCT app_id) FROM push.job_engagement") == 2, "the administrator sees both")
            #expect(try await db.scalar("SELECT count(*) FROM push.opens WHERE app_id = 'b'") == 1)
            #expect(try await db.scalar("SELECT count(*) FROM push.opens WHERE app_id = 'a'") == 1)
            #expect(try await Self.device(db, "b", TestTokens.token(2))?.badge == 0)
            #expect(try await Self.device(db, "a", TestTokens.token(1))?.badge == 2)
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE app_id = 'b'") == 1)
        }
    }

    @Test func aProducerUsesTheNewParametersAndFunctionsButReadsNoOpensOrSteps() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let producer = try await db.connect(asMemberOf: "pgpush_producer")
            defer { Task { try? await producer.close() } }
            let token = TestTokens.token(7)
            for sql in [
                "SELECT push.register_device('a', '\(token)', user_id => 'u1', locale => 'fr_CA')",
                "SELECT push.register_device('a', '\(TestTokens.token(8))', user_id => 'u1', replaces => '\(TestTokens.token(9))', locale => 'de')",
                #"SELECT push.enqueue('a', '{"aps":{"alert":"Hi"}}', user_ids => '{u1}', localized => '{"fr":{"aps":{"alert":"Salut"}}}', badge => 'increment')"#,
                #"INSERT INTO push.jobs (app_id, payload, localized, badge) VALUES ('a', '{"aps":{"alert":"Hi"}}', '{"fr":{"aps":{"alert":"Salut"}}}', 'increment') RETURNING id"#,
                "SELECT push.set_badge('a', token => '\(token)', value => 3)",
                "SELECT push.set_badge('a', user_id => 'u1')",
                "SELECT push.record_open('a', '\(token)', job_id => (SELECT max(job_id) FROM push.job_progress))",
                "SELECT * FROM push.job_engagement",
            ] {
                let failure = await RoleGrantTests.attempt(producer, sql, db: db)
                #expect(failure == nil, "producer was refused: \(sql): \(failure ?? "")")
            }
            #expect(try await db.scalar("SELECT count(*) FROM push.jobs WHERE badge = 'increment' AND variants ? 'fr'") == 2)
            #expect(try await db.scalar("SELECT count(*) FROM push.opens") == 1)
            #expect(try await Self.device(db, "a", token)?.locale == "fr-ca")
            for sql in [
                "SELECT * FROM push.opens",
                "SELECT * FROM push.badge_steps",
                "SELECT variants FROM push.jobs",
                #"INSERT INTO push.jobs (app_id, payload, variants) VALUES ('a', '{"aps":{}}', '{}')"#,
                "UPDATE push.devices SET badge = 9",
                "INSERT INTO push.opens (job_id, app_id, token, platform, opened_at) VALUES (1, 'a', 't', 'ios', now())",
                "SELECT push.remove_badge_steps(10)",
            ] {
                let failure = await RoleGrantTests.attempt(producer, sql, db: db)
                #expect(failure?.contains("permission denied") == true, "producer was allowed: \(sql)")
            }

            // A reader reads the engagement, and records nothing.
            let reader = try await db.connect(asMemberOf: "pgpush_reader")
            defer { Task { try? await reader.close() } }
            #expect(await RoleGrantTests.attempt(reader, "SELECT * FROM push.job_engagement", db: db) == nil)
            for sql in [
                "SELECT push.record_open('a', '\(token)', job_id => 1)",
                "SELECT push.set_badge('a', token => '\(token)')",
                "SELECT * FROM push.opens",
            ] {
                let failure = await RoleGrantTests.attempt(reader, sql, db: db)
                #expect(failure?.contains("permission denied") == true, "reader was allowed: \(sql)")
            }
        }
    }

    // MARK: push.badge_steps

    @Test func aWorkerRemovesTheBadgeStepsOfEndedJobsOnlyInBatches() async throws {
        try await TestDatabase.with { db in
            try await db.createApp("a")
            let running = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{"alert":"x"}}', badge => 'increment')"#)
            let ended = try await db.scalar(#"SELECT push.enqueue('a', '{"aps":{"alert":"y"}}', badge => 'increment')"#)
            try await db.exec("UPDATE push.jobs SET state = 'running' WHERE id = \(running)")
            try await db.exec("UPDATE push.jobs SET state = 'done' WHERE id = \(ended)")
            try await db.exec("""
                INSERT INTO push.badge_steps (job_id, token, badge)
                SELECT j, lpad(to_hex(g), 64, '0'), g FROM unnest(ARRAY[\(running), \(ended)]::int8[]) j, generate_series(1, 3) g
                """)
            let worker = try await db.connect(asMemberOf: "pgpush_worker")
            defer { Task { try? await worker.close() } }
            func removed(_ batch: Int) async throws -> Int {
                let rows = try await worker.query("SELECT push.remove_badge_steps(\(batch)::int)", logger: db.logger).collect()
                return try rows.first?.decode(Int.self) ?? -1
            }
            #expect(try await removed(2) == 2)
            #expect(try await removed(2) == 1)
            #expect(try await removed(2) == 0)
            #expect(try await db.scalar("SELECT count(*) FROM push.badge_steps WHERE job_id = \(running)") == 3)
            #expect(try await db.scalar("SELECT count(*) FROM push.badge_steps") == 3)
            // What the worker does with a step: record it, and move the device's counter.
            for sql in [
                "INSERT INTO push.badge_steps (job_id, token, badge) VALUES (\(running), 'x', 1)",
                "UPDATE push.devices SET badge = badge + 1 WHERE false",
                "SELECT * FROM push.job_engagement",
            ] {
                let failure = await RoleGrantTests.attempt(worker, sql, db: db)
                #expect(failure == nil, "worker was refused: \(sql): \(failure ?? "")")
            }
            for sql in [
                "UPDATE push.devices SET locale = 'fr' WHERE false",
                "UPDATE push.jobs SET variants = NULL, localized = NULL, badge = NULL WHERE false",
                "SELECT push.record_open('a', '\(TestTokens.token(1))', job_id => \(running))",
            ] {
                let failure = await RoleGrantTests.attempt(worker, sql, db: db)
                #expect(failure?.contains("permission denied") == true, "worker was allowed: \(sql)")
            }
        }
    }
}
