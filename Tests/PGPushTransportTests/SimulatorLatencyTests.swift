import PGPushSimulator
import Testing

/// `--latency-ms`, as `pgpush simulator` and the benches read it.
@Suite struct SimulatorLatencyTests {
    @Test func aNumberIsAFixedDelayAndZeroIsNone() {
        #expect(SimulatorLatency(milliseconds: "30") == .fixed(.milliseconds(30)))
        #expect(SimulatorLatency(milliseconds: " 30 ") == .fixed(.milliseconds(30)))
        #expect(SimulatorLatency(milliseconds: "0") == SimulatorLatency.none)
    }

    @Test func aRangeIsAUniformDelay() {
        #expect(SimulatorLatency(milliseconds: "30-80") == .uniform(.milliseconds(30), .milliseconds(80)))
        #expect(SimulatorLatency(milliseconds: "30-30") == .uniform(.milliseconds(30), .milliseconds(30)))
    }

    @Test(arguments: ["", "-5", "5-", "80-30", "1-2-3", "abc", "3.5", "30ms"])
    func anythingElseIsRefused(_ text: String) {
        #expect(SimulatorLatency(milliseconds: text) == nil)
    }
}
