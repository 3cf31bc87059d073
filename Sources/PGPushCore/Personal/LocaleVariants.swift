/// A job's message and its locale variants, and the rule that picks a device's: its own locale, then the same
/// locale with its last subtag dropped, and so on, then the job's own message. Locales are lowercase BCP 47
/// tags, as `push.devices.locale` and the keys of `push.jobs.variants` keep them: a device in `fr-ca` gets the
/// `fr-ca` variant, else `fr`, else the job's message; `zh-hant-tw` tries `zh-hant-tw`, `zh-hant`, `zh`.
public struct LocaleVariants<Value: Sendable>: Sendable {
    /// The job's own message, for a device without a locale or without a matching variant.
    public let base: Value
    /// The variants by locale.
    public let variants: [String: Value]

    public init(base: Value, variants: [String: Value] = [:]) {
        self.base = base
        self.variants = variants
    }

    /// The best match for a device's locale.
    public func best(for locale: String?) -> Value {
        guard !variants.isEmpty, var tag = locale, !tag.isEmpty else { return base }
        while true {
            if let variant = variants[tag] { return variant }
            guard let dash = tag.lastIndex(of: "-") else { return base }
            tag = String(tag[..<dash])
        }
    }

    /// The same variants with each value transformed.
    public func map<T: Sendable>(_ transform: (Value) throws -> T) rethrows -> LocaleVariants<T> {
        LocaleVariants<T>(base: try transform(base), variants: try variants.mapValues(transform))
    }
}

extension LocaleVariants where Value == [UInt8] {
    /// Reads the pairs the claim returns for a job with per-device content (`push.personal_bodies`): a locale,
    /// then its body, for each message; the empty locale is the job's own. Nil when there is no job message.
    public init?(pairs: [String]) {
        var base: [UInt8]?
        var variants: [String: [UInt8]] = [:]
        var index = 0
        while index + 1 < pairs.count {
            let (locale, body) = (pairs[index], Array(pairs[index + 1].utf8))
            if locale.isEmpty { base = body } else { variants[locale] = body }
            index += 2
        }
        guard let base else { return nil }
        self.init(base: base, variants: variants)
    }
}
