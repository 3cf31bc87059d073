import Foundation

/// A short hint per APNs, FCM or Web Push reason: what it usually means, and what to do. The outcomes page links each
/// reason to its hint (`/outcomes#hint-REASON`).
enum Remediation {
    static let hints: [(reason: String, hint: String)] = [
        ("BadDeviceToken", "In production this usually means sandbox (development build) tokens, or the app points at the wrong environment. A large share trips the safety valve: check the app's environment before confirming a stale audience."),
        ("DeviceTokenNotForTopic", "The token belongs to another bundle id: check the app's topic against the token's app."),
        ("Unregistered", "The app was uninstalled or the token expired: the device is pruned, nothing to do."),
        ("ExpiredToken", "The token expired: the device is pruned, nothing to do."),
        ("BadTopic", "The topic (bundle id) is wrong for the credential: fix push.apps.topic, then resume the app."),
        ("TopicDisallowed", "The credential may not send to this topic (or to a .voip/.complication suffix): check the key's or certificate's capabilities."),
        ("InvalidProviderToken", "Team id, key id or the .p8 key do not match: fix the app's credential paths, then resume."),
        ("ExpiredProviderToken", "The provider token aged past an hour: pgpush renews it; frequent ones mean a clock skew on a worker."),
        ("TooManyProviderTokenUpdates", "Provider tokens were minted too often: check that the workers share push.provider_tokens (one database)."),
        ("BadCertificate", "The client certificate is invalid or not for APNs: replace it, then resume the app."),
        ("BadCertificateEnvironment", "The certificate is for the other environment (sandbox vs production)."),
        ("PayloadTooLarge", "The payload is over 4 KB (5 KB for VoIP), or a push service refused the Web Push message's size (keep the job's web message small): shorten it. A job-level error: the job fails, the app goes on."),
        ("InvalidPushType", "The apns-push-type does not match the payload: fix the job's push_type."),
        ("BadExpirationDate", "The expiry is malformed: fix the job's expires_at."),
        ("TooManyRequests", "Too many pushes to one device: slow the producer down for that user."),
        ("Expired", "Not sent: the job's expires_at passed first. Enqueue sooner, or allow a longer expiry."),
        ("LeaseExpired", "A chunk kept dying with its worker (a poison chunk): look for crashing workers at that time."),
        ("UNREGISTERED", "FCM: the app instance is gone: the device is pruned, nothing to do."),
        ("SENDER_ID_MISMATCH", "FCM: the token belongs to another Firebase project: check the app's fcm_project_id."),
        ("THIRD_PARTY_AUTH_ERROR", "FCM: the APNs credentials in Firebase (the APNs auth key uploaded to the Firebase project) are missing or wrong: fix them in the Firebase console, then resume the app."),
        ("PERMISSION_DENIED", "FCM: the service account may not send for this project: grant it Firebase Cloud Messaging, then resume."),
        ("INVALID_ARGUMENT", "FCM: a bad token (pruned while the window is healthy) or a malformed message (the job fails): check the job's fcm fields."),
        ("QUOTA_EXCEEDED", "FCM: the project's quota was exceeded: retried with backoff; lower --fcm-quota-per-minute to match your quota."),
        ("UNAVAILABLE", "FCM was overloaded: retried with backoff, nothing to do unless it persists."),
        ("INTERNAL", "FCM's internal error: retried with backoff, nothing to do unless it persists."),
        ("UNAUTHENTICATED", "FCM refused the access token: check the service-account JSON (pgpush renews the token once before pausing)."),
        ("EndpointNotAllowed", "Web Push: the subscription's endpoint is not on a public push service (Google, Mozilla, Apple, Microsoft) nor allowed with --web-push-allow-origin: nothing was sent to it. Allow the origin only if it is a push service you run (a simulator)."),
        ("BadJwtToken", "Web Push (Apple): the VAPID token was refused, most often for its subject: use mailto:someone@your-domain or an https URL, without spaces, angle brackets, localhost or .local. The app's Web Push is paused: fix it, then resume the app."),
        ("VapidPkHashMismatch", "Web Push (Apple): the subscription was made with another VAPID public key (applicationServerKey): the browser must subscribe again with the app's key."),
        ("Gone", "Web Push: the browser unsubscribed or the subscription expired (410): the device is pruned, nothing to do."),
        ("NotFound", "Web Push: the subscription is unknown to its push service (404): the device is pruned, nothing to do."),
    ]

    static func hint(for reason: String?) -> String? {
        guard let reason else { return nil }
        if let hint = hints.first(where: { $0.reason == reason })?.hint { return hint }
        if reason.hasPrefix("TLS") {
            return "TLS to the provider failed and reconnecting cannot fix it: check the certificate's expiry and trust roots, then resume the app."
        }
        return nil
    }

    /// The anchor of a reason's hint on the outcomes page.
    static func anchor(_ reason: String) -> String {
        "hint-" + String(reason.unicodeScalars.map { CharacterSet.alphanumerics.contains($0) ? Character($0) : "-" })
    }
}
