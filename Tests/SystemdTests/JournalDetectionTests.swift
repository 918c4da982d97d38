import Foundation
@testable import Systemd
import TestSupport
import Testing

@Suite struct JournalDetectionTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var environment: [String: String]
        var stderrIdentity: FileIdentity?
        var socketExists: Bool
        var expected: Bool
        var testDescription: String { name }
    }

    static let stderrIdentity = FileIdentity(device: 25, inode: 40123)

    static let cases: [Case] = [
        Case(name: "stream matches stderr", environment: ["JOURNAL_STREAM": "25:40123"],
             stderrIdentity: stderrIdentity, socketExists: false, expected: true),
        Case(name: "stream matches, socket too", environment: ["JOURNAL_STREAM": "25:40123"],
             stderrIdentity: stderrIdentity, socketExists: true, expected: true),
        Case(name: "stream is another inode (stderr redirected)", environment: ["JOURNAL_STREAM": "25:40124"],
             stderrIdentity: stderrIdentity, socketExists: false, expected: false),
        Case(name: "stream is another device", environment: ["JOURNAL_STREAM": "26:40123"],
             stderrIdentity: stderrIdentity, socketExists: true, expected: false),
        Case(name: "stream does not match but service with socket",
             environment: ["JOURNAL_STREAM": "25:1", "INVOCATION_ID": "0123abcd"],
             stderrIdentity: stderrIdentity, socketExists: true, expected: true),
        Case(name: "stream garbage", environment: ["JOURNAL_STREAM": "25-40123"],
             stderrIdentity: stderrIdentity, socketExists: false, expected: false),
        Case(name: "stream with stderr closed", environment: ["JOURNAL_STREAM": "25:40123"],
             stderrIdentity: nil, socketExists: false, expected: false),
        Case(name: "terminal, journald running", environment: [:],
             stderrIdentity: stderrIdentity, socketExists: true, expected: false),
        Case(name: "service with socket", environment: ["INVOCATION_ID": "0123abcd"],
             stderrIdentity: stderrIdentity, socketExists: true, expected: true),
        Case(name: "notify service with socket", environment: ["NOTIFY_SOCKET": "/run/systemd/notify"],
             stderrIdentity: stderrIdentity, socketExists: true, expected: true),
        Case(name: "service without journald", environment: ["INVOCATION_ID": "0123abcd"],
             stderrIdentity: stderrIdentity, socketExists: false, expected: false),
        Case(name: "empty INVOCATION_ID", environment: ["INVOCATION_ID": ""],
             stderrIdentity: stderrIdentity, socketExists: true, expected: false),
        Case(name: "nothing", environment: [:], stderrIdentity: nil, socketExists: false, expected: false),
    ]

    @Test(arguments: cases)
    func truthTable(_ testCase: Case) {
        #expect(
            JournalDetection.shouldUseJournal(
                environment: testCase.environment, stderrIdentity: testCase.stderrIdentity,
                socketExists: testCase.socketExists
            ) == testCase.expected
        )
    }

    @Test func journalStreamParsing() {
        #expect(FileIdentity(journalStream: "8:12345") == FileIdentity(device: 8, inode: 12345))
        #expect(FileIdentity(journalStream: "18446744073709551615:1") == FileIdentity(device: .max, inode: 1))
        for garbage in ["", ":", "8:", ":9", "8:9:10", "a:b", "8 :9", "-1:2"] {
            #expect(FileIdentity(journalStream: garbage) == nil, "\(garbage)")
        }
    }

    @Test func descriptorIdentityIsTheFilesDeviceAndInode() throws {
        let directory = try TemporaryDirectory("tether-detect")
        defer { directory.remove() }
        let path = directory.path + "/file"
        #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        let inode = try #require(attributes[.systemFileNumber] as? Int)
        let identity = try #require(FileIdentity(descriptor: descriptor))
        #expect(identity.inode == UInt64(inode))
        #expect(FileIdentity(descriptor: -1) == nil)
    }

    @Test func onlyASocketCountsAsTheJournal() throws {
        let directory = try TemporaryDirectory("tether-detect")
        defer { directory.remove() }
        let socketPath = directory.path + "/journal.socket"
        let receiver = try DatagramReceiver(address: socketPath)
        let filePath = directory.path + "/file"
        #expect(FileManager.default.createFile(atPath: filePath, contents: Data()))
        #expect(JournalDetection.isSocket(atPath: receiver.address))
        #expect(!JournalDetection.isSocket(atPath: filePath))
        #expect(!JournalDetection.isSocket(atPath: directory.path))
        #expect(!JournalDetection.isSocket(atPath: directory.path + "/missing"))
    }
}
