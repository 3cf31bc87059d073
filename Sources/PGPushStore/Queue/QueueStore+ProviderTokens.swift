import Foundation
import PGPushCore
import PostgresNIO

extension QueueStore {
    /// The fleet's current provider token for (team, key), if one was minted.
    public func sharedProviderToken(teamID: String, keyID: String) async throws -> ProviderToken? {
        let rows = try await run("""
            SELECT jwt, issued_at FROM push.provider_tokens WHERE team_id = \(teamID) AND key_id = \(keyID)
            """)
        guard let row = rows.first else { return nil }
        let (jwt, issuedAt) = try row.decode((String, Date).self)
        return ProviderToken(jwt: jwt, issuedAt: issuedAt, teamID: teamID, keyID: keyID)
    }

    /// Replaces the fleet's provider token under a row lock, so that of many workers deciding at once only one
    /// mints: `decide` sees the token as it stands after the lock (or `nil`) and returns either that token to
    /// keep it, or a new one to store.
    public func replaceSharedProviderToken(
        teamID: String,
        keyID: String,
        _ decide: @escaping @Sendable (ProviderToken?) throws -> ProviderToken
    ) async throws -> ProviderToken {
        try await transaction { connection in
            // A transaction-scoped advisory lock also covers the very first mint, when no row exists to lock.
            try await self.run(
                "SELECT pg_advisory_xact_lock(hashtextextended(\("provider-token:\(teamID):\(keyID)"), 0))", on: connection)
            let rows = try await self.run("""
                SELECT jwt, issued_at FROM push.provider_tokens WHERE team_id = \(teamID) AND key_id = \(keyID)
                """, on: connection)
            let current = try rows.first.map { row -> ProviderToken in
                let (jwt, issuedAt) = try row.decode((String, Date).self)
                return ProviderToken(jwt: jwt, issuedAt: issuedAt, teamID: teamID, keyID: keyID)
            }
            let chosen = try decide(current)
            if chosen != current {
                try await self.run("""
                    INSERT INTO push.provider_tokens (team_id, key_id, jwt, issued_at, minted_by)
                    VALUES (\(teamID), \(keyID), \(chosen.jwt), \(chosen.issuedAt), \(self.workerID))
                    ON CONFLICT (team_id, key_id) DO UPDATE
                       SET jwt = EXCLUDED.jwt, issued_at = EXCLUDED.issued_at, minted_by = EXCLUDED.minted_by
                    """, on: connection)
            }
            return chosen
        }
    }
}

extension QueueStore {
    /// The key of a service account's row in `push.provider_tokens`.
    static func accessTokenKey(clientEmail: String) -> String { "fcm:" + clientEmail }

    /// The fleet's current FCM access token for a service account (client email, private key id), if any,
    /// with when it was issued.
    public func sharedAccessToken(clientEmail: String, keyID: String) async throws -> (token: FCMAccessToken, issuedAt: Date)? {
        let rows = try await run("""
            SELECT jwt, expires_at, issued_at FROM push.provider_tokens
             WHERE team_id = \(Self.accessTokenKey(clientEmail: clientEmail)) AND key_id = \(keyID) AND expires_at IS NOT NULL
            """)
        guard let row = rows.first else { return nil }
        let (value, expiresAt, issuedAt) = try row.decode((String, Date, Date).self)
        return (FCMAccessToken(value: value, expiresAt: expiresAt), issuedAt)
    }

    /// Replaces the fleet's FCM access token under a lock, so that of many workers deciding at once only one
    /// exchanges an assertion: `decide` sees the token as it stands after the lock and returns it to keep it,
    /// or a new one (from the token endpoint) to store. The lock is held while `decide` runs, so the others
    /// wait for the new token instead of exchanging their own.
    public func replaceSharedAccessToken(
        clientEmail: String,
        keyID: String,
        _ decide: @escaping @Sendable (FCMAccessToken?) async throws -> FCMAccessToken
    ) async throws -> (token: FCMAccessToken, issuedAt: Date) {
        let team = Self.accessTokenKey(clientEmail: clientEmail)
        return try await transaction { connection in
            // The lock is held while one worker exchanges (up to the exchange's timeout); the others wait for it
            // rather than fail on the worker's usual 5-second lock timeout.
            try await self.run("SET LOCAL lock_timeout = '30s'", on: connection)
            try await self.run(
                "SELECT pg_advisory_xact_lock(hashtextextended(\("provider-token:\(team):\(keyID)"), 0))", on: connection)
            let rows = try await self.run("""
                SELECT jwt, expires_at, issued_at FROM push.provider_tokens
                 WHERE team_id = \(team) AND key_id = \(keyID) AND expires_at IS NOT NULL
                """, on: connection)
            let current = try rows.first.map { row -> (FCMAccessToken, Date) in
                let (value, expiresAt, issuedAt) = try row.decode((String, Date, Date).self)
                return (FCMAccessToken(value: value, expiresAt: expiresAt), issuedAt)
            }
            let chosen = try await decide(current?.0)
            if let current, chosen == current.0 { return current }
            do {
                try await self.run("""
                    INSERT INTO push.provider_tokens (team_id, key_id, jwt, issued_at, minted_by, expires_at)
                    VALUES (\(team), \(keyID), \(chosen.value), now(), \(self.workerID), \(chosen.expiresAt))
                    ON CONFLICT (team_id, key_id) DO UPDATE
                       SET jwt = EXCLUDED.jwt, issued_at = EXCLUDED.issued_at, minted_by = EXCLUDED.minted_by,
                           expires_at = EXCLUDED.expires_at
                    """, on: connection)
            }
            return (chosen, Date())
        }
    }
}
