import Logging
import PGPushCore

/// Wraps the process's log handler so that nothing it writes carries a secret or a whole device token:
/// the message, every metadata value and an attached error go through ``LogRedaction`` first. One place
/// for the whole process, whichever format it logs in.
struct RedactingLogHandler: LogHandler {
    var wrapped: any LogHandler

    var logLevel: Logger.Level {
        get { wrapped.logLevel }
        set { wrapped.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { wrapped.metadata }
        set { wrapped.metadata = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { wrapped[metadataKey: key] }
        set { wrapped[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        event.message = "\(LogRedaction.redact(event.message.description))"
        var metadata = event.metadata ?? [:]
        if let error = event.error {
            metadata["error"] = .string("\(error)")
            event.error = nil
        }
        event.metadata = metadata.isEmpty ? nil : metadata.mapValues(Self.redact)
        // The handler's own metadata (set through the logger, e.g. a job id) is redacted as it is written.
        var handler = wrapped
        if !handler.metadata.isEmpty { handler.metadata = handler.metadata.mapValues(Self.redact) }
        handler.log(event: event)
    }

    static func redact(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let text): .string(LogRedaction.redact(text))
        case .stringConvertible(let convertible): .string(LogRedaction.redact(convertible.description))
        case .array(let values): .array(values.map(redact))
        case .dictionary(let values): .dictionary(values.mapValues(redact))
        }
    }
}
