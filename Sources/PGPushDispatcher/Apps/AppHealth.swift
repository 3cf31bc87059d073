import Logging
import PGPushStore
import Synchronization

/// Counts configuration errors per app and provider and pauses the app after the first few in a row, so a
/// wrong credential or topic never burns through a broadcast. Counted per provider: an app's APNs successes
/// must not hide its FCM credential being refused. The pause itself is written by the worker loop (``drainPauses()``).
final class AppHealth: Sendable {
    private struct State {
        var errors: [String: Int] = [:]
        var lastReason: [String: String] = [:]
        var paused: Set<String> = []
        var pendingPauses: [String: String] = [:]
        /// Pauses handed to the worker loop whose database write may not have landed yet; a sync must not
        /// undo them in the meantime.
        var writing: Set<String> = []
    }

    private let state = Mutex(State())
    let threshold: Int

    init(threshold: Int) {
        self.threshold = max(1, threshold)
    }

    func isPaused(_ app: String) -> Bool {
        state.withLock { $0.paused.contains(app) }
    }

    func recordSuccess(_ app: String, provider: String = "apns") {
        let key = app + "|" + provider
        state.withLock { state in
            if state.errors[key] != nil { state.errors[key] = 0 }
        }
    }

    func recordConfigurationError(_ app: String, provider: String = "apns", reason: String) {
        let key = app + "|" + provider
        state.withLock { state in
            let count = (state.errors[key] ?? 0) + 1
            state.errors[key] = count
            state.lastReason[app] = reason
            if count >= threshold && !state.paused.contains(app) {
                state.paused.insert(app)
                state.pendingPauses[app] = reason
            }
        }
    }

    /// Pauses to write to `push.apps`, each once.
    func drainPauses() -> [String: String] {
        state.withLock { state in
            defer { state.pendingPauses = [:] }
            state.writing.formUnion(state.pendingPauses.keys)
            return state.pendingPauses
        }
    }

    /// A pause whose write failed (the database was down): it is handed out again by ``drainPauses()``.
    func retryPause(_ app: String, reason: String) {
        state.withLock { state in
            state.pendingPauses[app] = reason
        }
    }

    /// Syncs with the database: an app whose `paused_reason` was cleared (`pgpush apps resume`) starts again.
    func sync(pausedInDatabase: Set<String>) {
        state.withLock { state in
            // A pause this worker is still writing counts as written once the database shows it.
            state.writing.subtract(pausedInDatabase)
            for app in state.paused
            where !pausedInDatabase.contains(app) && state.pendingPauses[app] == nil && !state.writing.contains(app) {
                state.paused.remove(app)
                state.errors = state.errors.filter { !$0.key.hasPrefix(app + "|") }
            }
            state.paused.formUnion(pausedInDatabase)
        }
    }
}
