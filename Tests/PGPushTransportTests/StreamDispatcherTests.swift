import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import PGPushCore
import Synchronization
import Testing

@testable import PGPushTransport

/// The stream dispatcher on an `EmbeddedChannel`: frames in, frames out, no socket and no HTTP/2 handler.
@Suite("HTTP/2 stream dispatcher")
struct StreamDispatcherTests {
    /// What the dispatcher reported, in order.
    final class Recorder: Sendable {
        let results = Mutex<[(tag: Int, result: HTTP2StreamResult)]>([])
        let events = Mutex<[HTTP2ConnectionEvent]>([])

        func onResult(_ tag: Int) -> @Sendable (HTTP2StreamResult) -> Void {
            { result in self.results.withLock { $0.append((tag, result)) } }
        }

        var delivered: [(tag: Int, result: HTTP2StreamResult)] { results.withLock { $0 } }
        var reported: [HTTP2ConnectionEvent] { events.withLock { $0 } }
    }

    struct Harness {
        let channel: EmbeddedChannel
        let dispatcher: HTTP2StreamDispatcher
        let recorder: Recorder

        init() throws {
            let channel = EmbeddedChannel()
            let recorder = Recorder()
            let dispatcher = HTTP2StreamDispatcher(
                rules: APNsRules(),
                results: HTTP2DeferredResults(eventLoop: channel.eventLoop),
                onEvent: { event in recorder.events.withLock { $0.append(event) } }
            )
            try channel.pipeline.syncOperations.addHandler(dispatcher)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
            self.channel = channel
            self.dispatcher = dispatcher
            self.recorder = recorder
        }

        func open(tag: Int, body: [UInt8] = Array("{}".utf8), timeout: TimeAmount = .seconds(15), keepsBody: Bool = false) {
            var headers = HPACKHeaders()
            headers.add(name: ":method", value: "POST")
            headers.add(name: ":path", value: "/\(tag)")
            dispatcher.open([HTTP2PendingStream(
                headers: HTTP2HeaderBlock(headers), body: body, timeout: timeout, maximumBodyBytes: 4096, keepsBody: keepsBody,
                onResult: recorder.onResult(tag))])
        }

        /// The frames written since the last call.
        func written() throws -> [HTTP2Frame] {
            var frames: [HTTP2Frame] = []
            while let frame = try channel.readOutbound(as: HTTP2Frame.self) { frames.append(frame) }
            return frames
        }

        func answer(_ streamID: HTTP2StreamID, status: Int, body: String? = nil) throws {
            let headers = HPACKHeaders([(":status", String(status))])
            try channel.writeInbound(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: body == nil))))
            if let body {
                let buffer = channel.allocator.buffer(string: body)
                try channel.writeInbound(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(buffer), endStream: true))))
            }
        }

        /// Deferred results are delivered once the event loop is done with the current work.
        func deliver() { channel.embeddedEventLoop.run() }
    }

    private func status(_ result: HTTP2StreamResult) -> Int? {
        if case .response(let response) = result { return response.status }
        return nil
    }

    @Test func eachRequestGoesOutAsHeadersAndDataOnItsOwnOddStream() throws {
        let harness = try Harness()
        harness.open(tag: 1)
        harness.open(tag: 2)
        let frames = try harness.written()
        #expect(frames.map(\.streamID) == [1, 1, 3, 3])
        guard case .headers(let headers) = frames[0].payload, case .data(let data) = frames[1].payload else {
            Issue.record("expected HEADERS then DATA, got \(frames.map(\.payload))")
            return
        }
        #expect(headers.headers.first(name: ":path") == "/1")
        #expect(data.endStream)
    }

    @Test func responsesReachTheirOwnRequestsInAnyOrder() throws {
        let harness = try Harness()
        harness.open(tag: 1)
        harness.open(tag: 2)
        _ = try harness.written()
        try harness.answer(3, status: 410, body: #"{"reason":"Unregistered","timestamp":1700000000000}"#)
        try harness.answer(1, status: 200)
        #expect(harness.recorder.delivered.isEmpty, "results wait for the event loop to finish its current work")
        harness.deliver()
        let delivered = harness.recorder.delivered
        #expect(delivered.map(\.tag) == [2, 1])
        #expect(delivered.map { status($0.result) } == [410, 200])
        if case .response(let response) = delivered[0].result {
            #expect(response.reason == "Unregistered")
            #expect(response.timestampMilliseconds == 1_700_000_000_000)
            #expect(response.body.isEmpty)
        }
    }

    @Test func responseHeadersAreReadOnceEachWhateverTheirOrderOrCase() throws {
        let harness = try Harness()
        harness.open(tag: 1)
        harness.open(tag: 2)
        _ = try harness.written()
        let apnsID = "7d9a4e42-7bd8-4ef5-9a41-1d6e4d6a42b3"
        // A 429 with its headers after others and spelled in capitals, and a repeated header: the first wins.
        let limited = HPACKHeaders([
            ("server", "apns"), (":status", "429"), ("Retry-After", "7"), ("retry-after", "99"),
            ("APNS-ID", apnsID), ("apns-id", "00000000-0000-0000-0000-000000000000"),
        ])
        try harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: limited, endStream: true))))
        // A success's retry-after is not a wait the caller should honour.
        let success = HPACKHeaders([(":status", "200"), ("retry-after", "5"), ("apns-id", apnsID)])
        try harness.channel.writeInbound(HTTP2Frame(streamID: 3, payload: .headers(.init(headers: success, endStream: true))))
        harness.deliver()
        let responses = harness.recorder.delivered.compactMap { entry -> ProviderResponse? in
            if case .response(let response) = entry.result { return response }
            return nil
        }
        #expect(responses.map(\.status) == [429, 200])
        #expect(responses.map(\.retryAfter) == ["7", nil])
        #expect(responses.map { $0.apnsID?.apnsIDString } == [apnsID, apnsID])
    }

    @Test func headersWithoutAStatusEndTheStreamAsMissingIt() throws {
        let harness = try Harness()
        harness.open(tag: 1)
        _ = try harness.written()
        let headers = HPACKHeaders([("apns-id", "7d9a4e42-7bd8-4ef5-9a41-1d6e4d6a42b3"), (":status", "two hundred")])
        try harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: headers, endStream: true))))
        harness.deliver()
        guard case .closed(_, let resetCode, let sawHeadersWithoutStatus)? = harness.recorder.delivered.first?.result else {
            Issue.record("expected a stream closed without a response, got \(harness.recorder.delivered)")
            return
        }
        #expect(resetCode == nil)
        #expect(sawHeadersWithoutStatus)
    }

    @Test func keptBodyIsReturnedUnparsed() throws {
        let harness = try Harness()
        harness.open(tag: 1, keepsBody: true)
        _ = try harness.written()
        try harness.answer(1, status: 401, body: #"{"error":{"status":"UNAUTHENTICATED"}}"#)
        harness.deliver()
        guard case .response(let response) = harness.recorder.delivered.first?.result else {
            Issue.record("no response")
            return
        }
        #expect(response.reason == nil)
        #expect(String(decoding: response.body, as: UTF8.self) == #"{"error":{"status":"UNAUTHENTICATED"}}"#)
    }

    @Test func emptyBodyEndsTheStreamWithItsHeaders() throws {
        let harness = try Harness()
        harness.open(tag: 1, body: [])
        let frames = try harness.written()
        #expect(frames.count == 1)
        guard case .headers(let headers) = frames.first?.payload else {
            Issue.record("expected one HEADERS frame, got \(frames.map(\.payload))")
            return
        }
        #expect(headers.endStream)
    }

    @Test func keptBodyOfAnAPNsErrorStillGivesItsReason() throws {
        let harness = try Harness()
        harness.open(tag: 1, keepsBody: true)
        harness.open(tag: 2, keepsBody: true)
        _ = try harness.written()
        try harness.answer(1, status: 400, body: #"{"reason":"ChannelNotRegistered"}"#)
        let created = HPACKHeaders([(":status", "201"), ("apns-channel-id", "dHN0LXNyY2gtY2hubA==")])
        try harness.channel.writeInbound(HTTP2Frame(streamID: 3, payload: .headers(.init(headers: created, endStream: true))))
        harness.deliver()
        let responses = harness.recorder.delivered.compactMap { delivered -> ProviderResponse? in
            if case .response(let response) = delivered.result { return response }
            return nil
        }
        #expect(responses.count == 2)
        #expect(responses.first?.reason == "ChannelNotRegistered")
        #expect(responses.first?.body == Array(#"{"reason":"ChannelNotRegistered"}"#.utf8))
        #expect(responses.last?.status == 201)
        #expect(responses.last?.channelID == "dHN0LXNyY2gtY2hubA==")
        #expect(responses.last?.reason == nil)
    }

    @Test func longResponseBodyGetsStreamCredit() throws {
        let harness = try Harness()
        harness.open(tag: 1, keepsBody: true)
        _ = try harness.written()
        let headers = HPACKHeaders([(":status", "200")])
        try harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: headers))))
        let chunk = harness.channel.allocator.buffer(repeating: 0x61, count: 16_384)
        for _ in 0..<2 {
            try harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .data(.init(data: .byteBuffer(chunk)))))
        }
        let updates = try harness.written().compactMap { frame -> (HTTP2StreamID, Int)? in
            if case .windowUpdate(let increment) = frame.payload { return (frame.streamID, increment) }
            return nil
        }
        #expect(updates.contains { $0.0 == 1 && $0.1 == 32_768 }, "the stream's own window is reopened")
        #expect(updates.contains { $0.0 == .rootStream && $0.1 == 32_768 })
        try harness.channel.writeInbound(HTTP2Frame(
            streamID: 1, payload: .data(.init(data: .byteBuffer(harness.channel.allocator.buffer(string: "end")), endStream: true))))
        harness.deliver()
        guard case .response(let response) = harness.recorder.delivered.first?.result else {
            Issue.record("no response")
            return
        }
        #expect(response.body.count == 4096, "kept up to the body limit")
    }

    @Test func resetStreamEndsWithoutResponse() throws {
        let harness = try Harness()
        harness.open(tag: 1)
        _ = try harness.written()
        try harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .rstStream(.refusedStream)))
        harness.deliver()
        guard case .closed(let streamID, let resetCode, _) = harness.recorder.delivered.first?.result else {
            Issue.record("expected a closed stream")
            return
        }
        #expect(streamID == 1)
        #expect(resetCode == HTTP2ConnectionStateMachine.refusedStreamCode)
    }

    @Test func connectionFramesBecomeEvents() throws {
        let harness = try Harness()
        try harness.channel.writeInbound(HTTP2Frame(
            streamID: .rootStream, payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: 500)]))))
        try harness.channel.writeInbound(HTTP2Frame(
            streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 7), ack: true)))
        let events = harness.recorder.reported
        guard events.count == 2, case .settings(let limit) = events[0], case .pingAck(let payload) = events[1] else {
            Issue.record("unexpected events \(events)")
            return
        }
        #expect(limit == 500)
        #expect(payload == 7)
    }

    @Test func goAwayStopsNewStreams() throws {
        let harness = try Harness()
        harness.open(tag: 1)
        _ = try harness.written()
        try harness.channel.writeInbound(HTTP2Frame(
            streamID: .rootStream,
            payload: .goAway(lastStreamID: 1, errorCode: .noError, opaqueData: harness.channel.allocator.buffer(string: #"{"reason":"Shutdown"}"#))))
        guard case .goAway(let lastStreamID, _, let debugData) = harness.recorder.reported.last else {
            Issue.record("no GOAWAY event")
            return
        }
        #expect(lastStreamID == 1)
        #expect(debugData == #"{"reason":"Shutdown"}"#)
        harness.open(tag: 2)
        #expect(try harness.written().isEmpty)
        harness.deliver()
        guard case .closed(let streamID, _, _) = harness.recorder.delivered.first(where: { $0.tag == 2 })?.result else {
            Issue.record("the stream opened after GOAWAY must end unsent")
            return
        }
        #expect(streamID == nil)
    }

    @Test func expiredStreamTimesOutAndIsReset() throws {
        let harness = try Harness()
        harness.open(tag: 1, timeout: .seconds(1))
        _ = try harness.written()
        harness.dispatcher.sweepDeadlines(now: .now() + .seconds(2))
        let frames = try harness.written()
        #expect(frames.count == 1)
        if case .rstStream(let code) = frames.first?.payload { #expect(code == .cancel) } else { Issue.record("no RST_STREAM") }
        harness.deliver()
        guard case .timedOut = harness.recorder.delivered.first?.result else {
            Issue.record("expected a timeout")
            return
        }
        // A late answer for the reset stream reaches nobody.
        try harness.answer(1, status: 200)
        harness.deliver()
        #expect(harness.recorder.delivered.count == 1)
    }

    @Test func bodyBeyondTheSendWindowWaitsForWindowUpdate() throws {
        let harness = try Harness()
        let big = [UInt8](repeating: 0x61, count: HTTP2StreamDispatcher.initialConnectionWindow - 10)
        harness.open(tag: 1, body: big)
        harness.open(tag: 2, body: Array(repeating: 0x62, count: 100))
        #expect(try harness.written().map(\.streamID) == [1, 1])
        try harness.channel.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: 1000)))
        #expect(try harness.written().map(\.streamID) == [3, 3])
    }

    @Test func closeSendsOurGoAwayEndsOpenStreamsAndReportsOnce() throws {
        let harness = try Harness()
        harness.open(tag: 1)
        _ = try harness.written()
        try harness.channel.close().wait()
        // Our GOAWAY went out before the close.
        let written = try harness.written()
        guard written.count == 1, case .goAway(.rootStream, .noError, nil) = written[0].payload else {
            Issue.record("expected our GOAWAY, got \(written.map(\.payload))")
            return
        }
        harness.deliver()
        guard case .closed(let streamID, nil, false) = harness.recorder.delivered.first?.result else {
            Issue.record("the open stream must end without a response")
            return
        }
        #expect(streamID == 1)
        let closes = harness.recorder.reported.filter { if case .closed = $0 { true } else { false } }
        #expect(closes.count == 1)
    }
}
