import DurableFile
import Foundation
import Logging
import MetricsTextfile
import TestSupport
import Testing

/// `PATH.tmp`, the file written before the rename over `PATH`, is always
/// created afresh (O_CREAT|O_EXCL|O_NOFOLLOW): a symlink someone with write
/// access to the directory planted there is removed, never written through;
/// a stale one from a crash is replaced.
@Suite struct TemporaryFileTests {
    /// A symlink at `tether.prom.tmp` to a file outside: the metrics
    /// writer once opened it with O_TRUNC, truncating and overwriting the
    /// target, then renamed the symlink over tether.prom.
    @Test func aSymlinkPlantedAtTheTemporaryNameIsNeverFollowed() throws {
        let directory = try TemporaryDirectory("metrics-symlink")
        defer { directory.remove() }
        let outside = try TemporaryDirectory("metrics-outside")
        defer { outside.remove() }
        let target = outside.path + "/precious"
        try "keep me\n".write(toFile: target, atomically: false, encoding: .utf8)
        let path = directory.path + "/tether.prom"
        try FileManager.default.createSymbolicLink(atPath: path + ".tmp", withDestinationPath: target)

        let registry = MetricsRegistry(instanceName: "default")
        registry.counter("tether_test_total", help: "A counter for the test.").increment(by: 3)
        let writer = MetricsTextfileWriter(path: path, registry: registry, logger: Logger(label: "test"))
        #expect(writer.write() != nil)

        #expect(try String(contentsOfFile: target, encoding: .utf8) == "keep me\n", "the symlink's target is untouched")
        var info = stat()
        #expect(lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG, "tether.prom is a regular file, not the symlink")
        #expect(PrometheusSamples(try String(contentsOfFile: path, encoding: .utf8)).value("tether_test_total", ["instance_name": "default"]) == 3)
        #expect(lstat(path + ".tmp", &info) != 0, "the symlink is gone")
    }

    /// The same through SmallFile, which also writes the forwarder's cursor
    /// and status file: a symlink to a file, a stale regular file, and a
    /// dangling symlink (O_CREAT alone would create its target) at `.tmp`.
    @Test func smallFileReplacesWhatIsAtTheTemporaryNameWithoutFollowingIt() throws {
        let directory = try TemporaryDirectory("smallfile-tmp")
        defer { directory.remove() }
        let target = directory.path + "/outside"
        try "keep me\n".write(toFile: target, atomically: false, encoding: .utf8)
        let path = directory.path + "/cursor"

        try FileManager.default.createSymbolicLink(atPath: path + ".tmp", withDestinationPath: target)
        try SmallFile.replace(path, with: Array("1\n".utf8), durable: true)
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "keep me\n")
        #expect(try SmallFile.read(path, limit: 64) == Array("1\n".utf8))

        try "stale, from a crash".write(toFile: path + ".tmp", atomically: false, encoding: .utf8)
        try SmallFile.replace(path, with: Array("2\n".utf8), durable: false)
        #expect(try SmallFile.read(path, limit: 64) == Array("2\n".utf8))

        let dangling = directory.path + "/created-through-the-link"
        try FileManager.default.createSymbolicLink(atPath: path + ".tmp", withDestinationPath: dangling)
        try SmallFile.replace(path, with: Array("3\n".utf8), durable: false, mode: 0o600)
        #expect(!FileManager.default.fileExists(atPath: dangling), "nothing is created at a dangling symlink's target")
        #expect(try SmallFile.read(path, limit: 64) == Array("3\n".utf8))
        var info = stat()
        #expect(lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_mode & 0o777 == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["cursor", "outside"])
    }

    /// What cannot be removed (a directory at the name) is an error naming
    /// it, not a loop.
    @Test func aDirectoryAtTheTemporaryNameIsAnError() throws {
        let directory = try TemporaryDirectory("smallfile-tmpdir")
        defer { directory.remove() }
        let path = directory.path + "/status.json"
        try FileManager.default.createDirectory(atPath: path + ".tmp", withIntermediateDirectories: false)
        #expect(throws: SmallFile.Failure.self) { try SmallFile.replace(path, with: [1], durable: false) }
        do {
            try SmallFile.replace(path, with: [1], durable: false)
        } catch {
            #expect(error.operation.contains("\(path).tmp"), "\(error)")
        }
    }
}
