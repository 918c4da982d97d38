import FoundationEssentials
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The objects a `Bus` exports, with the standard interfaces derived from
/// them: Properties, Introspectable and, where enabled, ObjectManager.
struct ObjectRegistry {
    private(set) var objects: [ObjectPath: [String: ExportedInterface]] = [:]
    /// Paths that serve org.freedesktop.DBus.ObjectManager for everything below them.
    var managerPaths: Set<ObjectPath> = []

    mutating func add(_ path: ObjectPath, _ interfaces: [ExportedInterface]) {
        var existing = objects[path] ?? [:]
        for interface in interfaces { existing[interface.name] = interface }
        objects[path] = existing
    }

    @discardableResult
    mutating func remove(_ path: ObjectPath, interfaces names: [String]? = nil) -> [String] {
        guard var existing = objects[path] else { return [] }
        let removed = names?.filter { existing[$0] != nil } ?? Array(existing.keys)
        for name in removed { existing.removeValue(forKey: name) }
        objects[path] = existing.isEmpty ? nil : existing
        return removed
    }

    func interface(_ path: ObjectPath, _ name: String) -> ExportedInterface? { objects[path]?[name] }

    mutating func update(_ path: ObjectPath, _ interface: String, property: String, value: DBusValue) -> Bool {
        guard objects[path]?[interface] != nil else { return false }
        objects[path]?[interface]?.properties[property] = value
        return true
    }

    /// The manager path whose subtree holds `path`, if any.
    func manager(for path: ObjectPath) -> ObjectPath? {
        managerPaths.filter { path != $0 && path.isDescendant(of: $0) }.max { $0.rawValue.count < $1.rawValue.count }
    }

    /// `a{sa{sv}}` for one object: its interfaces and their properties, plus
    /// the standard interfaces with empty dictionaries, as BlueZ sends them.
    func interfacesAndProperties(_ path: ObjectPath, only names: [String]? = nil) -> DBusValue {
        var entries: [DBusValue.DictionaryEntry] = []
        let interfaces = objects[path] ?? [:]
        let wanted = names ?? (interfaces.keys.sorted() + [StandardInterface.introspectable, StandardInterface.properties])
        for name in wanted {
            let properties = interfaces[name]?.currentProperties ?? [:]
            entries.append(.init(.string(name), .vardict(properties)))
        }
        return .dictionary(key: .string, value: .dictionary(key: .string, value: .variant), entries)
    }

    /// `a{oa{sa{sv}}}` for GetManagedObjects.
    func managedObjects(below manager: ObjectPath) -> DBusValue {
        let entries = objects.keys.filter { $0 != manager && $0.isDescendant(of: manager) }.sorted().map {
            DBusValue.DictionaryEntry(.objectPath($0), interfacesAndProperties($0))
        }
        return .dictionary(
            key: .objectPath, value: .dictionary(key: .string, value: .dictionary(key: .string, value: .variant)),
            entries
        )
    }

    /// Whether anything is exported at or below `path` (intermediate nodes
    /// such as `/org` exist for introspection even with no interface).
    func hasNode(_ path: ObjectPath) -> Bool {
        objects.keys.contains { $0.isDescendant(of: path) } || managerPaths.contains(path)
    }

    func introspect(_ path: ObjectPath) -> String {
        var xml = """
            <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
            <node>
              <interface name="org.freedesktop.DBus.Introspectable">
                <method name="Introspect"><arg name="xml" type="s" direction="out"/></method>
              </interface>

            """
        if objects[path] != nil {
            xml += """
                  <interface name="org.freedesktop.DBus.Properties">
                    <method name="Get"><arg type="s" direction="in"/><arg type="s" direction="in"/><arg type="v" direction="out"/></method>
                    <method name="GetAll"><arg type="s" direction="in"/><arg type="a{sv}" direction="out"/></method>
                    <method name="Set"><arg type="s" direction="in"/><arg type="s" direction="in"/><arg type="v" direction="in"/></method>
                    <signal name="PropertiesChanged"><arg type="s"/><arg type="a{sv}"/><arg type="as"/></signal>
                  </interface>

                """
        }
        if managerPaths.contains(path) {
            xml += """
                  <interface name="org.freedesktop.DBus.ObjectManager">
                    <method name="GetManagedObjects"><arg type="a{oa{sa{sv}}}" direction="out"/></method>
                    <signal name="InterfacesAdded"><arg type="o"/><arg type="a{sa{sv}}"/></signal>
                    <signal name="InterfacesRemoved"><arg type="o"/><arg type="as"/></signal>
                  </interface>

                """
        }
        for (name, interface) in (objects[path] ?? [:]).sorted(by: { $0.key < $1.key }) {
            xml += "  <interface name=\"\(name)\">\n"
            for (method, spec) in interface.methods.sorted(by: { $0.key < $1.key }) {
                xml += "    <method name=\"\(method)\">"
                for type in DBusType.parseList(spec.inSignature) ?? [] {
                    xml += "<arg type=\"\(xmlEscape(type.signature))\" direction=\"in\"/>"
                }
                for type in DBusType.parseList(spec.outSignature) ?? [] {
                    xml += "<arg type=\"\(xmlEscape(type.signature))\" direction=\"out\"/>"
                }
                xml += "</method>\n"
            }
            for (signal, signature) in interface.signals.sorted(by: { $0.key < $1.key }) {
                xml += "    <signal name=\"\(signal)\">"
                for type in DBusType.parseList(signature) ?? [] {
                    xml += "<arg type=\"\(xmlEscape(type.signature))\"/>"
                }
                xml += "</signal>\n"
            }
            let live = interface.live?() ?? [:]
            for (property, value) in interface.currentProperties.sorted(by: { $0.key < $1.key }) {
                let access = interface.writable.contains(property) ? "readwrite" : "read"
                let head = "    <property name=\"\(property)\" type=\"\(xmlEscape(value.type.signature))\" access=\"\(access)\""
                if live[property] != nil {
                    xml += head + ">\n"
                    xml += "      <annotation name=\"org.freedesktop.DBus.Property.EmitsChangedSignal\" value=\"false\"/>\n"
                    xml += "    </property>\n"
                } else {
                    xml += head + "/>\n"
                }
            }
            xml += "  </interface>\n"
        }
        for child in children(of: path) {
            xml += "  <node name=\"\(xmlEscape(child))\"/>\n"
        }
        return xml + "</node>\n"
    }

    private func children(of path: ObjectPath) -> [String] {
        let prefix = path.rawValue == "/" ? "/" : path.rawValue + "/"
        var names = Set<String>()
        for key in objects.keys where key.rawValue.hasPrefix(prefix) {
            let rest = key.rawValue.dropFirst(prefix.count)
            if let first = rest.split(separator: "/").first { names.insert(String(first)) }
        }
        return names.sorted()
    }

    private func xmlEscape(_ s: String) -> String {
        s.replacing("&", with: "&amp;").replacing("<", with: "&lt;")
            .replacing(">", with: "&gt;").replacing("\"", with: "&quot;")
    }
}

extension ObjectRegistry {
    mutating func removeProperty(_ path: ObjectPath, _ interface: String, property: String) {
        objects[path]?[interface]?.properties.removeValue(forKey: property)
    }
}
