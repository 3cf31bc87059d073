/// How much one claim may take: the worker's free room in notifications, and a cap per app for apps that
/// cannot send quickly (rate-limited, or backing off after 429/503).
public struct ClaimBudget: Sendable, Hashable {
    /// Notifications the worker has room for. The claim takes chunks in order until their estimated tokens
    /// reach it; the last chunk may overshoot, so even a full-size chunk fits into a small room.
    public var room: Int
    /// At most this many chunks in one claim (one-token jobs make one chunk per notification).
    public var maximumChunks: Int
    /// Apps whose tokens are capped in this claim, with the tokens each may still take. An app with 0 is not
    /// looked at at all, so its queue never hides other apps' work.
    public var appAllowances: [String: Int]
    /// When set, only chunks of at most this many estimated tokens are claimed: the fast lane that takes newly
    /// expanded small jobs while the room is held by a broadcast's large chunks.
    public var maximumChunkTokens: Int?

    public init(room: Int, maximumChunks: Int, appAllowances: [String: Int] = [:], maximumChunkTokens: Int? = nil) {
        self.room = room
        self.maximumChunks = maximumChunks
        self.appAllowances = appAllowances
        self.maximumChunkTokens = maximumChunkTokens
    }
}
