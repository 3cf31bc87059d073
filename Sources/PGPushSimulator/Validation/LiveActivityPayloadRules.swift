import Foundation
import NIOCore
import Synchronization

/// A parsed JSON value that keeps integers apart from other numbers and from booleans, which
/// `JSONSerialization` blurs on Linux (both become `NSNumber`).
enum SimulatorJSONValue: Decodable, Sendable, Hashable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([SimulatorJSONValue])
    case object([String: SimulatorJSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([SimulatorJSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: SimulatorJSONValue].self))
        }
    }

    /// The body as JSON, `nil` when it does not parse.
    static func parse(_ body: ByteBuffer) -> SimulatorJSONValue? {
        body.withUnsafeReadableBytes { bytes in
            try? JSONDecoder().decode(SimulatorJSONValue.self, from: Data(bytes))
        }
    }

    var object: [String: SimulatorJSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    var string: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    var isInteger: Bool {
        if case .integer = self { return true }
        return false
    }
}

/// What a Live Activity payload must hold, per Apple's ActivityKit documentation: `aps.timestamp` (integer UNIX
/// seconds), `aps.event`, `aps.content-state` for an update or end, and for a push-to-start also `alert`,
/// `attributes-type` and `attributes`. A device would drop anything else; the simulator says
/// `400 BadRequestPayload` (APNs' own answer to such payloads is not documented).
enum LiveActivityPayloadRules {
    /// Which events a request may carry.
    enum Endpoint {
        /// `/3/device/<token>`: start, update or end.
        case device
        /// `/4/broadcasts/apps/<bundle id>`: update or end (a channel updates activities, never starts one).
        case broadcast
    }

    static let rejection = SimulatorRejection(status: 400, reason: "BadRequestPayload")

    /// The last body found valid for each endpoint. A sender sends one job's payload to many tokens: such a
    /// body gets the same verdict without being decoded again. Decoding every body cost the simulator a third
    /// of a Live Activity broadcast's throughput on a machine it shares with the sender.
    private static let lastValid = Mutex<(device: [UInt8], broadcast: [UInt8])>(([], []))

    /// `nil` when the payload is a valid Live Activity payload for `endpoint`.
    static func check(_ body: ByteBuffer, endpoint: Endpoint) -> SimulatorRejection? {
        let known = body.withUnsafeReadableBytes { bytes in
            lastValid.withLock { last in
                let remembered = endpoint == .device ? last.device : last.broadcast
                return !remembered.isEmpty && remembered.elementsEqual(bytes)
            }
        }
        if known { return nil }
        let rejection = decodeAndCheck(body, endpoint: endpoint)
        if rejection == nil {
            let bytes = Array(body.readableBytesView)
            lastValid.withLock { last in
                if endpoint == .device { last.device = bytes } else { last.broadcast = bytes }
            }
        }
        return rejection
    }

    private static func decodeAndCheck(_ body: ByteBuffer, endpoint: Endpoint) -> SimulatorRejection? {
        guard let aps = SimulatorJSONValue.parse(body)?.object?["aps"]?.object else { return rejection }
        guard aps["timestamp"]?.isInteger == true else { return rejection }
        switch aps["event"]?.string {
        case "update", "end":
            guard aps["content-state"]?.object != nil else { return rejection }
        case "start" where endpoint == .device:
            guard let alert = aps["alert"], alert.object != nil || alert.string != nil,
                  aps["attributes-type"]?.string != nil, aps["attributes"]?.object != nil
            else { return rejection }
        default:
            return rejection
        }
        return nil
    }
}
