import Foundation
import NIOCore
import Testing

@testable import PGPushTransport

/// The nghttp2 engine's receive path fed malformed and truncated frame sequences, from a seeded generator so a
/// failure can be replayed: `PGPUSH_FUZZ_SEED=<seed>` (the seed is printed on every run). Nothing may crash,
/// and every request opened on a session ends with exactly one outcome by the time its channel has closed.
///
/// The full tier (`PGPUSH_TEST_TIER=full`) feeds 100,000 sequences; the fast tier 5,000.
@Suite("nghttp2 engine: fuzzed receive path")
struct NGHTTP2EngineFuzzTests {
    typealias Harness = NGHTTP2EngineTests.Harness

    static var sequenceCount: Int {
        ProcessInfo.processInfo.environment["PGPUSH_TEST_TIER"] == "full" ? 100_000 : 5_000
    }

    // About 11 s in a debug build at a load average of 8 on 2 cores; the limit only catches a hang, and leaves
    // room for a machine several times busier (at a load average of 18 a run took up to 220 s).
    @Test(.timeLimit(.minutes(5)))
    func malformedAndTruncatedSequencesNeverCrashAndEveryRequestEnds() throws {
        let seed = ProcessInfo.processInfo.environment["PGPUSH_FUZZ_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...UInt64.max)
        var generator = FrameSequenceGenerator(seed: seed)
        let started = ContinuousClock.now
        var sessions = 0
        var requests = 0
        var sessionsEndedByTheEngine = 0
        var outcomes: [String: Int] = [:]

        var harness = try Harness.ready(maxConcurrentStreams: 100)
        var opened: [Int] = []
        // Streams whose HEADERS the engine wrote and that no frame of ours has ended yet.
        var live: [UInt32] = []
        var sequencesOnSession = 0
        var sequencesPerSession: [Int] = []
        func finish(_ harness: Harness, opened: [Int]) throws {
            sessions += 1
            sequencesPerSession.append(sequencesOnSession)
            if !harness.channel.isActive { sessionsEndedByTheEngine += 1 }
            if harness.channel.isActive { try harness.channel.close().wait() }
            let delivered = harness.deliver()
            var perTag: [Int: Int] = [:]
            for (tag, result) in delivered {
                perTag[tag, default: 0] += 1
                outcomes[Self.kind(result), default: 0] += 1
            }
            let missing = opened.filter { perTag[$0] == nil }
            let repeated = perTag.filter { $0.value > 1 }.map(\.key)
            #expect(missing.isEmpty, "seed \(seed): requests without an outcome: \(missing)")
            #expect(repeated.isEmpty, "seed \(seed): requests with more than one outcome: \(repeated)")
        }

        for _ in 0..<Self.sequenceCount {
            if !harness.channel.isActive || sequencesOnSession == 200 {
                try finish(harness, opened: opened)
                harness = try Harness.ready(maxConcurrentStreams: 100)
                opened = []
                live = []
                sequencesOnSession = 0
            }
            sequencesOnSession += 1
            if generator.chance(1, in: 3) {
                for _ in 0..<generator.int(in: 1...3) {
                    requests += 1
                    opened.append(requests)
                    let body = generator.chance(1, in: 4) ? [UInt8](repeating: 0x61, count: generator.int(in: 0...5_120)) : Array("{}".utf8)
                    harness.open(tag: requests, body: body, timeout: .seconds(60), maximumBodyBytes: 4096, keepsBody: generator.chance(1, in: 2))
                }
            }
            try absorb(harness.written(), into: &live)
            for chunk in generator.sequence(live: &live) {
                guard harness.channel.isActive else { break }
                try harness.feed(chunk)
            }
            if generator.chance(1, in: 50) { harness.engine.sweepDeadlines(now: .now() + .seconds(3600)) }
            if generator.chance(1, in: 50) { harness.engine.sendPing(generator.next()) }
            try absorb(harness.written(), into: &live)
        }
        try finish(harness, opened: opened)

        let elapsed = ContinuousClock.now - started
        let longest = sequencesPerSession.max() ?? 0
        print(
            "nghttp2 fuzz seed \(seed): \(Self.sequenceCount) sequences, \(sessions) sessions (\(sessionsEndedByTheEngine) ended by the engine, "
                + "up to \(longest) sequences on one), "
                + "\(requests) requests in \(elapsed); outcomes \(outcomes.sorted { $0.key < $1.key })")
    }

    /// A stream is live once the engine wrote its HEADERS, and over once it wrote a reset for it.
    private func absorb(_ frames: [TestFrame.Parsed], into live: inout [UInt32]) {
        for frame in frames {
            if frame.kind == .headers { live.append(frame.stream) }
            if frame.kind == .rstStream { live.removeAll { $0 == frame.stream } }
        }
    }

    private static func kind(_ result: HTTP2StreamResult) -> String {
        switch result {
        case .response(let response): "response \(response.status / 100)xx"
        case .timedOut: "timed out"
        case .closed(nil, _, _): "not sent"
        case .closed(_, let code?, _): code <= 0xD ? "reset \(code)" : "reset, unknown code"
        case .closed(_, nil, true): "missing status"
        case .closed(_, nil, false): "closed"
        }
    }
}

/// SplitMix64: small, fast and the same on every platform, so a seed replays a run exactly.
struct FrameSequenceGenerator: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func int(in range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &self) }
    mutating func chance(_ numerator: Int, in denominator: Int) -> Bool { int(in: 1...denominator) <= numerator }
    mutating func bytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255, using: &self) } }
    mutating func element<T>(_ array: [T]) -> T { array[int(in: 0...(array.count - 1))] }

    /// Header blocks built once: HPACK encoding in a debug build costs more than the rest of a sequence.
    private static let blocks: [[UInt8]] = [
        TestFrame.headerBlock([(":status", "200")]),
        TestFrame.headerBlock([(":status", "400"), ("content-type", "application/json")]),
        TestFrame.headerBlock([(":status", "410"), ("apns-id", "6E3A6D4E-6E8B-4E36-9C86-0C1B5C6E3B0A")]),
        TestFrame.headerBlock([(":status", "999")]),
        TestFrame.headerBlock([(":status", "abc")]),
        TestFrame.headerBlock([("apns-id", "x")]),
        TestFrame.headerBlock([(":status", "200"), ("x-huge", String(repeating: "h", count: 20_000))]),
        TestFrame.headerBlock([("trailer", "yes")]),
        [0x3F, 0xE1, 0x1F],  // a dynamic table size update to 4,096
        [0xFF, 0xFF, 0xFF, 0xFF, 0x0F],  // an index far beyond both tables
        [0x82],  // :method GET, a request header in an answer
    ]

    private static let bodies: [[UInt8]] = [
        Array(#"{"reason":"BadDeviceToken"}"#.utf8),
        Array(#"{"reason":"Unregistered","timestamp":1700000000000}"#.utf8),
        Array(#"{"reason":"#.utf8),
        Array("not json".utf8),
        [],
    ]

    /// One sequence: one to six frames, fed in one to three chunks so frames also arrive split across reads.
    /// Two in three are well-formed (answers to the live streams, their resets, SETTINGS, PING, WINDOW_UPDATE,
    /// GOAWAY, frames of unknown type), so a session lives through many of them; the third carries one hostile
    /// frame among them (a field out of range, a length that lies, a frame on a stream that is not open, a
    /// CONTINUATION out of nowhere) and may have bytes flipped, its tail cut off or garbage appended.
    mutating func sequence(live: inout [UInt32]) -> [[UInt8]] {
        let hostile = chance(1, in: 3)
        let count = int(in: 1...6)
        let hostileIndex = int(in: 0...(count - 1))
        var bytes: [UInt8] = []
        for index in 0..<count {
            bytes += hostile && index == hostileIndex ? hostileFrame(live: live) : wellFormedFrame(live: &live)
        }
        if hostile {
            if chance(1, in: 3), !bytes.isEmpty {
                for _ in 0..<int(in: 1...4) { bytes[int(in: 0...(bytes.count - 1))] = UInt8.random(in: 0...255, using: &self) }
            }
            if chance(1, in: 3), bytes.count > 1 { bytes.removeLast(int(in: 1...(bytes.count - 1))) }
            if chance(1, in: 10) { bytes += self.bytes(int(in: 1...64)) }
        }
        var chunks: [[UInt8]] = []
        var rest = bytes[...]
        for _ in 0..<int(in: 0...2) where rest.count > 1 {
            let cut = int(in: 1...(rest.count - 1))
            chunks.append(Array(rest.prefix(cut)))
            rest = rest.dropFirst(cut)
        }
        chunks.append(Array(rest))
        return chunks
    }

    /// A frame a server may send: it ends the stream it answers or resets, which leaves `live`.
    private mutating func wellFormedFrame(live: inout [UInt32]) -> [UInt8] {
        switch int(in: 0...9) {
        case 0...4 where !live.isEmpty:
            let stream = live.remove(at: int(in: 0...(live.count - 1)))
            let block = Self.blocks[chance(7, in: 8) ? 0 : int(in: 0...7)]
            let body = element(Self.bodies)
            if body.isEmpty || chance(1, in: 8) {
                return TestFrame.frame(.headers, flags: TestFrame.endHeaders | TestFrame.endStream, stream: stream, block)
            }
            return TestFrame.frame(.headers, flags: TestFrame.endHeaders, stream: stream, block) + TestFrame.data(stream: stream, body, endStream: true)
        case 5 where !live.isEmpty:
            let stream = live.remove(at: int(in: 0...(live.count - 1)))
            return TestFrame.rstStream(stream: stream, code: UInt32(element([0, 1, 2, 7, 8, 11])))
        case 6:
            let entries = (0..<int(in: 0...3)).map { _ in
                (id: UInt16(element([1, 3, 4, 5, 6, 8, 0xFF])), value: UInt32(element([0, 1, 7, 100, 65_535])))
            }.filter { $0.id != 5 || $0.value >= 16_384 }
            return chance(1, in: 4) ? TestFrame.settingsAck : TestFrame.settings(entries)
        case 7:
            return TestFrame.ping(next(), ack: chance(1, in: 2))
        case 8:
            return TestFrame.windowUpdate(stream: chance(1, in: 2) || live.isEmpty ? 0 : element(live), increment: UInt32(int(in: 1...65_535)))
        default:
            if chance(1, in: 20) {
                return TestFrame.goAway(lastStreamID: live.isEmpty ? 0 : element(live), code: UInt32(element([0, 2, 11])), debug: element(["", #"{"reason":"Shutdown"}"#]))
            }
            // An extension frame type, which must be ignored.
            return TestFrame.frame(UInt8(int(in: 10...255)), stream: live.isEmpty ? 0 : element(live), bytes(int(in: 0...50)))
        }
    }

    private mutating func stream(_ openStreams: [UInt32]) -> UInt32 {
        if !openStreams.isEmpty, chance(4, in: 5) { return element(openStreams) }
        return element([0, 2, 1_001, 0x7FFF_FFFF, UInt32(int(in: 0...200))])
    }

    private mutating func hostileFrame(live openStreams: [UInt32]) -> [UInt8] {
        let stream = stream(openStreams)
        switch int(in: 0...15) {
        case 0...3:
            let block = Self.blocks[chance(3, in: 4) ? 0 : int(in: 0...(Self.blocks.count - 1))]
            let body = element(Self.bodies)
            let endOnHeaders = body.isEmpty || chance(1, in: 8)
            var bytes = TestFrame.frame(.headers, flags: TestFrame.endHeaders | (endOnHeaders ? TestFrame.endStream : 0), stream: stream, block)
            if !endOnHeaders { bytes += TestFrame.data(stream: stream, body, endStream: chance(7, in: 8)) }
            return bytes
        case 4:
            // A header block split over CONTINUATION frames (missing END_HEADERS now and then), or a CONTINUATION out of nowhere.
            let block = element(Self.blocks)
            let cut = int(in: 0...block.count)
            let first = chance(4, in: 5) ? TestFrame.frame(.headers, flags: TestFrame.endStream, stream: stream, Array(block.prefix(cut))) : []
            return first + TestFrame.frame(.continuation, flags: chance(4, in: 5) ? TestFrame.endHeaders : 0, stream: stream, Array(block.dropFirst(cut)))
        case 5:
            return TestFrame.data(stream: stream, bytes(int(in: 0...(chance(1, in: 10) ? 70_000 : 300))), endStream: chance(1, in: 2))
        case 6:
            // Padded DATA whose pad length may exceed the frame.
            let body = bytes(int(in: 0...40))
            return TestFrame.frame(.data, flags: TestFrame.padded | TestFrame.endStream, stream: stream, [UInt8(int(in: 0...60))] + body)
        case 7:
            return TestFrame.rstStream(stream: stream, code: UInt32(element([0, 1, 2, 7, 8, 11, 0xFFFF_FFFF])))
        case 8:
            let last = chance(1, in: 2) ? (openStreams.last ?? 0) : UInt32(int(in: 0...10))
            return TestFrame.goAway(lastStreamID: last, code: UInt32(element([0, 1, 2, 11, 0xDEAD])), debug: element(["", #"{"reason":"Shutdown"}"#, "\u{FF}"]))
        case 9:
            let entries = (0..<int(in: 0...4)).map { _ in
                (id: UInt16(element([1, 2, 3, 4, 5, 6, 8, 9, 0xFF])), value: UInt32(element([0, 1, 7, 100, 16_383, 16_384, 65_535, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF])))
            }
            return chance(1, in: 6) ? TestFrame.settingsAck : TestFrame.settings(entries)
        case 10:
            return TestFrame.ping(next(), ack: chance(1, in: 2))
        case 11:
            return TestFrame.windowUpdate(stream: chance(1, in: 2) ? 0 : stream, increment: UInt32(element([0, 1, 1_000, 65_535, 0x7FFF_FFFF])))
        case 12:
            return TestFrame.frame(.pushPromise, flags: TestFrame.endHeaders, stream: stream, TestFrame.bigEndian(UInt32(2)) + Self.blocks[0])
        case 13:
            return TestFrame.frame(.priority, stream: stream, bytes(int(in: 0...6)))
        case 14:
            // A connection frame whose length is wrong for its type.
            return TestFrame.frame(element([TestFrame.Kind.settings, .ping, .goAway, .windowUpdate, .rstStream]), stream: element([0, stream]), bytes(int(in: 0...13)))
        default:
            // A frame longer than the 16,384 bytes allowed, or HEADERS whose block is random bytes.
            if chance(1, in: 2) { return TestFrame.frame(.headers, flags: TestFrame.endHeaders, stream: stream, bytes(int(in: 0...40))) }
            return [0x01, 0x00, 0x00, 0x00, 0x00] + TestFrame.bigEndian(stream) + bytes(int(in: 0...100))
        }
    }
}
