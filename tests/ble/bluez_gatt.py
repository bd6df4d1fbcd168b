'''BlueZ (bluetoothd 5.66) emulation with GATT, as a python-dbusmock template, for vessel's BLE tests.

Self-contained (the stock bluez5 template has no GATT and stores Connected wrongly, see
shared/notes/HARNESS.md 1.2). It fakes bluetoothd at its D-Bus API, where the bridge looks:
object paths (/org/bluez/hci0/dev_XX_XX/service000a/char000b), InterfacesAdded before
ServicesResolved=true after Connect, InterfacesRemoved before Connected=false on a disconnect,
notifications as PropertiesChanged(Value) only while Notifying, org.bluez.Error.* names.

Parameters (-p JSON): {"adapter": "hci0", "nus": "C0:FF:EE:00:00:01", "known": "C0:FF:EE:00:00:02",
"resolve_delay_ms": 50, "mtu": 247, "board": "/path/to/board_helper"}. "nus" stages an advertising Nordic UART board whose RX
(6e400002, write/write-without-response) echoes as notifications on TX (6e400003, read/notify);
"known" exports a bonded, cached device with a battery service (0x180f, level 0x2a19: read/notify,
and an encrypted characteristic 0x2a3d) that never advertises, as bluetoothd does for bonded devices.
With "board", the NUS board does not echo: it runs the board library (bridges/uart/board) in the
helper program named (tests/ble/board_helper.c): what the host writes to RX goes to the helper's
stdin as UART bytes, what the helper writes to stdout is notified on TX, cut to ATT MTU - 3.

Fidelity limits (what the bridge cannot rely on here): no radio, connection timing or real MTU
exchange (MTU is what SetMtu says); no agent round trip for pairing (Pair sets Paired/Bonded);
the GATT database is re-exported on every connect (bluetoothd keeps it for bonded devices); one
discovery session for all clients and filters ignored except that discovery exports staged devices;
no InProgress for overlapping reads (replies are synchronous); every object also shows
org.freedesktop.DBus.Mock.
'''

import os
import subprocess

import dbus
import dbusmock
from dbusmock import mockobject
from gi.repository import GLib

BUS_NAME = 'org.bluez'
MAIN_OBJ = '/'
SYSTEM_BUS = True
IS_OBJECT_MANAGER = True

MOCK_IFACE = 'org.bluez.Mock'
ADAPTER_IFACE = 'org.bluez.Adapter1'
DEVICE_IFACE = 'org.bluez.Device1'
SERVICE_IFACE = 'org.bluez.GattService1'
CHAR_IFACE = 'org.bluez.GattCharacteristic1'
OM_IFACE = 'org.freedesktop.DBus.ObjectManager'
PROPS_IFACE = 'org.freedesktop.DBus.Properties'

NUS_SERVICE = '6e400001-b5a3-f393-e0a9-e50e24dcca9e'
NUS_RX = '6e400002-b5a3-f393-e0a9-e50e24dcca9e'
NUS_TX = '6e400003-b5a3-f393-e0a9-e50e24dcca9e'
BATTERY_SERVICE = '0000180f-0000-1000-8000-00805f9b34fb'
BATTERY_LEVEL = '00002a19-0000-1000-8000-00805f9b34fb'
SECRET_CHAR = '00002a3d-0000-1000-8000-00805f9b34fb'

# Module state: dbusmock's Reset does not clear it, hence one mock process per test.
devices = {}        # device path -> dict(staged, connected, services=[svc path], mtu, fail_connects, ...)
services = {}       # service path -> dict(uuid, primary, device, chars=[char path])
chars = {}          # char path -> dict(uuid, flags, value, notifying, written=[], service)
loopback = {}       # rx char path -> tx char path
boards = {}         # rx char path -> dict(proc, tx) of a board helper process
settings = {'resolve_delay_ms': 50, 'mtu': 247}


def _err(name, text):
    return dbus.exceptions.DBusException(text, name='org.bluez.Error.' + name)


def _root():
    return mockobject.objects['/']


def _set_props(obj, iface, changes):
    for k, v in changes.items():
        obj.props[iface][k] = v
    obj.EmitSignal(PROPS_IFACE, 'PropertiesChanged', 'sa{sv}as', [iface, changes, []])


def _export(path, iface, props, methods):
    '''Adds the object and announces it (InterfacesAdded), as bluetoothd does for a new object.'''
    _root().AddObject(path, iface, props, methods)
    _root().EmitSignal(OM_IFACE, 'InterfacesAdded', 'oa{sa{sv}}', [dbus.ObjectPath(path), {iface: props}])
    return mockobject.objects[path]


def _unexport(path, iface):
    _root().RemoveObject(path)
    _root().EmitSignal(OM_IFACE, 'InterfacesRemoved', 'oas', [dbus.ObjectPath(path), [iface]])


def load(mock, parameters):
    mockobject.objects.setdefault(mock.path, mock)  # the root is registered only after load()
    mock.AddObject('/org/bluez', 'org.bluez.AgentManager1', {}, [
        ('RegisterAgent', 'os', '', ''), ('UnregisterAgent', 'o', '', ''),
        ('RequestDefaultAgent', 'o', '', '')])
    settings['resolve_delay_ms'] = int(parameters.get('resolve_delay_ms', 50))
    settings['mtu'] = int(parameters.get('mtu', 247))
    adapter = parameters.get('adapter', 'hci0')
    AddAdapter(mock, adapter, 'vessel-test')
    if 'nus' in parameters:
        dev = AddAdvertisingDevice(mock, adapter, parameters['nus'], 'MockBoard', [NUS_SERVICE], -50)
        svc = AddGattService(mock, dev, 0x000a, NUS_SERVICE, True)
        rx = AddGattCharacteristic(mock, svc, 0x000b, NUS_RX, ['write', 'write-without-response'], [])
        tx = AddGattCharacteristic(mock, svc, 0x000d, NUS_TX, ['read', 'notify'], list(b'hello'))
        if parameters.get('board'):
            _start_board(rx, tx, [parameters['board']] + [str(a) for a in parameters.get('board_args', [])])
        else:
            loopback[rx] = tx
    if 'known' in parameters:
        dev = AddKnownDevice(mock, adapter, parameters['known'], 'MockSensor', [BATTERY_SERVICE])
        svc = AddGattService(mock, dev, 0x0010, BATTERY_SERVICE, True)
        AddGattCharacteristic(mock, svc, 0x0011, BATTERY_LEVEL, ['read', 'notify'], [87])
        AddGattCharacteristic(mock, svc, 0x0014, SECRET_CHAR,
                              ['encrypt-read', 'encrypt-write'], list(b'secret'))


@dbus.service.method(MOCK_IFACE, in_signature='ss', out_signature='s')
def AddAdapter(self, name, alias):
    path = '/org/bluez/' + name
    n = int(name[-1]) if name[-1].isdigit() else 0
    props = {
        'Address': dbus.String(f'00:AA:00:00:00:{n:02X}', variant_level=1),
        'AddressType': dbus.String('public', variant_level=1),
        'Name': dbus.String(alias, variant_level=1), 'Alias': dbus.String(alias, variant_level=1),
        'Powered': dbus.Boolean(True, variant_level=1),
        'Discovering': dbus.Boolean(False, variant_level=1),
        'Pairable': dbus.Boolean(True, variant_level=1),
        'UUIDs': dbus.Array([], signature='s', variant_level=1),
    }
    _export(path, ADAPTER_IFACE, props, [
        ('StartDiscovery', '', '', StartDiscovery), ('StopDiscovery', '', '', StopDiscovery),
        ('SetDiscoveryFilter', 'a{sv}', '', lambda self, f: None),
        ('RemoveDevice', 'o', '', RemoveDevice)])
    mockobject.objects[path].discovering = False
    return path


def _device_props(adapter, addr, alias, uuids, rssi, bonded):
    props = {
        'Address': dbus.String(addr, variant_level=1),
        'AddressType': dbus.String('random', variant_level=1),
        'Name': dbus.String(alias, variant_level=1), 'Alias': dbus.String(alias, variant_level=1),
        'Adapter': dbus.ObjectPath('/org/bluez/' + adapter, variant_level=1),
        'UUIDs': dbus.Array(uuids, signature='s', variant_level=1),
        'Paired': dbus.Boolean(bonded, variant_level=1), 'Bonded': dbus.Boolean(bonded, variant_level=1),
        'Trusted': dbus.Boolean(bonded, variant_level=1), 'Blocked': dbus.Boolean(False, variant_level=1),
        'Connected': dbus.Boolean(False, variant_level=1),
        'ServicesResolved': dbus.Boolean(False, variant_level=1),
        'LegacyPairing': dbus.Boolean(False, variant_level=1),
    }
    if rssi is not None:  # bluetoothd has RSSI only for devices seen advertising in this session
        props['RSSI'] = dbus.Int16(rssi, variant_level=1)
    return props


def _new_device(adapter, addr, alias, uuids, rssi, bonded, staged):
    path = f'/org/bluez/{adapter}/dev_' + addr.upper().replace(':', '_')
    devices[path] = {'staged': staged, 'props': _device_props(adapter, addr, alias, uuids, rssi, bonded),
                     'connected': False, 'resolved': False, 'services': [], 'fail_connects': 0,
                     'fail_name': 'Failed', 'generation': 0}
    if not staged:
        _export_device(path)
    return path


def _export_device(path):
    d = devices[path]
    d['staged'] = False
    _export(path, DEVICE_IFACE, d['props'], [
        ('Connect', '', '', Connect), ('Disconnect', '', '', Disconnect), ('Pair', '', '', Pair),
        ('CancelPairing', '', '', '')])


@dbus.service.method(MOCK_IFACE, in_signature='sssasn', out_signature='o')
def AddAdvertisingDevice(self, adapter, addr, alias, uuids, rssi):
    '''Stages a device that appears (InterfacesAdded) when discovery starts.'''
    path = _new_device(adapter, addr, alias, uuids, rssi, False, True)
    adapter_obj = mockobject.objects.get('/org/bluez/' + adapter)
    if adapter_obj is not None and adapter_obj.discovering:
        _export_device(path)
    return path


@dbus.service.method(MOCK_IFACE, in_signature='sssas', out_signature='o')
def AddKnownDevice(self, adapter, addr, alias, uuids):
    '''A bonded device bluetoothd already knows: exported now, never announced by discovery.'''
    return _new_device(adapter, addr, alias, uuids, None, True, False)


@dbus.service.method(MOCK_IFACE, in_signature='oqsb', out_signature='o')
def AddGattService(self, dev, handle, uuid, primary):
    path = f'{dev}/service{handle:04x}'
    services[path] = {'uuid': uuid, 'primary': primary, 'device': dev, 'chars': []}
    devices[dev]['services'].append(path)
    return path


@dbus.service.method(MOCK_IFACE, in_signature='oqsasay', out_signature='o')
def AddGattCharacteristic(self, svc, handle, uuid, flags, value):
    path = f'{svc}/char{handle:04x}'
    chars[path] = {'uuid': uuid, 'flags': [str(f) for f in flags], 'value': bytes(value),
                   'notifying': False, 'written': [], 'service': svc}
    services[svc]['chars'].append(path)
    return path


def StartDiscovery(adapter):
    adapter.discovering = True
    _set_props(adapter, ADAPTER_IFACE, {'Discovering': dbus.Boolean(True, variant_level=1)})
    prefix = adapter.path + '/'
    for path, d in list(devices.items()):
        if d['staged'] and path.startswith(prefix):
            _export_device(path)


def StopDiscovery(adapter):
    if not adapter.discovering:
        raise _err('Failed', 'No discovery started')
    adapter.discovering = False
    _set_props(adapter, ADAPTER_IFACE, {'Discovering': dbus.Boolean(False, variant_level=1)})


def RemoveDevice(adapter, path):
    path = str(path)
    if path not in devices or devices[path]['staged']:
        raise _err('DoesNotExist', 'Does Not Exist')
    _drop_link(path)
    _unexport(path, DEVICE_IFACE)
    del devices[path]


def _char_props(path):
    c = chars[path]
    return {'UUID': dbus.String(c['uuid'], variant_level=1),
            'Service': dbus.ObjectPath(c['service'], variant_level=1),
            'Value': dbus.Array(c['value'], signature='y', variant_level=1),
            'Notifying': dbus.Boolean(c['notifying'], variant_level=1),
            'Flags': dbus.Array(c['flags'], signature='s', variant_level=1),
            'MTU': dbus.UInt16(settings['mtu'], variant_level=1)}


def _resolve(path, generation):
    d = devices.get(path)
    if d is None or not d['connected'] or d['generation'] != generation:
        return False
    for svc in d['services']:
        s = services[svc]
        _export(svc, SERVICE_IFACE, {'UUID': dbus.String(s['uuid'], variant_level=1),
                                     'Device': dbus.ObjectPath(path, variant_level=1),
                                     'Primary': dbus.Boolean(s['primary'], variant_level=1)}, [])
        for ch in s['chars']:
            chars[ch]['notifying'] = False  # a new link has no CCCD subscription
            _export(ch, CHAR_IFACE, _char_props(ch), [
                ('ReadValue', 'a{sv}', 'ay', ReadValue), ('WriteValue', 'aya{sv}', '', WriteValue),
                ('StartNotify', '', '', StartNotify), ('StopNotify', '', '', StopNotify)])
    d['resolved'] = True
    _set_props(mockobject.objects[path], DEVICE_IFACE, {'ServicesResolved': dbus.Boolean(True, variant_level=1)})
    return False


def Connect(device):
    d = devices[device.path]
    if d['connected']:
        raise _err('AlreadyConnected', 'Already Connected')
    if d['fail_connects'] > 0:
        d['fail_connects'] -= 1
        raise _err(d['fail_name'], 'le-connection-abort-by-local')
    d['connected'] = True
    d['generation'] += 1
    _set_props(device, DEVICE_IFACE, {'Connected': dbus.Boolean(True, variant_level=1)})
    GLib.timeout_add(settings['resolve_delay_ms'], _resolve, device.path, d['generation'])


def _drop_link(path):
    '''Link gone (Disconnect or radio loss): GATT objects go first, then ServicesResolved and
    Connected, in bluetoothd's order.'''
    d = devices[path]
    if not d['connected']:
        return False
    dev = mockobject.objects[path]
    if d['resolved']:
        _set_props(dev, DEVICE_IFACE, {'ServicesResolved': dbus.Boolean(False, variant_level=1)})
        for svc in reversed(d['services']):
            for ch in reversed(services[svc]['chars']):
                chars[ch]['notifying'] = False
                _unexport(ch, CHAR_IFACE)
            _unexport(svc, SERVICE_IFACE)
    d['connected'] = False
    d['resolved'] = False
    _set_props(dev, DEVICE_IFACE, {'Connected': dbus.Boolean(False, variant_level=1)})
    return True


def Disconnect(device):
    if not _drop_link(device.path):
        raise _err('NotConnected', 'Not Connected')


def Pair(device):
    if device.props[DEVICE_IFACE]['Paired']:
        raise _err('AlreadyExists', 'Already Exists')
    _set_props(device, DEVICE_IFACE, {'Paired': dbus.Boolean(True, variant_level=1),
                                      'Bonded': dbus.Boolean(True, variant_level=1)})


def _check_access(ch_path, kind):
    c = chars[ch_path]
    dev = services[c['service']]['device']
    if devices[dev].pop('drop_on_access', False):
        _drop_link(dev)  # the link dies while the request is on the air
        raise _err('Failed', 'Not connected')
    if not devices[dev]['connected']:
        raise _err('NotConnected', 'Not Connected')
    if f'encrypt-{kind}' in c['flags'] and not mockobject.objects[dev].props[DEVICE_IFACE]['Paired']:
        raise _err('NotAuthorized', 'Insufficient Authentication')  # ATT error 0x05
    return c


def ReadValue(ch, options):
    c = _check_access(ch.path, 'read')
    if 'read' not in c['flags'] and 'encrypt-read' not in c['flags']:
        raise _err('NotPermitted', 'Read not permitted')
    offset = int(options.get('offset', 0))
    if offset > len(c['value']):
        raise _err('InvalidOffset', 'Invalid offset')
    _set_props(ch, CHAR_IFACE, {'Value': dbus.Array(c['value'], signature='y', variant_level=1)})
    return dbus.Array(c['value'][offset:], signature='y')


def WriteValue(ch, value, options):
    c = _check_access(ch.path, 'write')
    kind = str(options.get('type', 'request'))
    needed = 'write-without-response' if kind == 'command' else 'write'
    if needed not in c['flags'] and 'encrypt-write' not in c['flags']:
        raise _err('NotPermitted', 'Write not permitted')
    mtu = settings['mtu']
    if len(value) > mtu - 3 and kind == 'command':
        raise _err('Failed', 'Operation failed with ATT error: 0x0d')  # too long for one packet
    data = bytes(value)
    c['written'].append(data)
    every = c.get('drop_writes_every', 0)
    if every:
        c['writes'] = c.get('writes', 0) + 1
        if c['writes'] % every == 0:
            return  # acknowledged by the link, lost before the board's application saw it
    if ch.path in boards:
        os.write(boards[ch.path]['proc'].stdin.fileno(), data)
    elif ch.path in loopback:
        _notify(loopback[ch.path], data)
    elif 'encrypt-write' in c['flags'] or 'write' in c['flags']:
        c['value'] = data


def StartNotify(ch):
    c = _check_access(ch.path, 'read')
    if 'notify' not in c['flags'] and 'indicate' not in c['flags']:
        raise _err('NotSupported', 'Notify not supported')
    if c['notifying']:
        return  # bluetoothd answers a second StartNotify of the same client with success
    c['notifying'] = True
    _set_props(ch, CHAR_IFACE, {'Notifying': dbus.Boolean(True, variant_level=1)})


def StopNotify(ch):
    c = chars[ch.path]
    if not c['notifying']:
        raise _err('Failed', 'No notify session started')
    c['notifying'] = False
    _set_props(ch, CHAR_IFACE, {'Notifying': dbus.Boolean(False, variant_level=1)})


def _notify(ch_path, data):
    c = chars[ch_path]
    if not c['notifying'] or ch_path not in mockobject.objects:
        return False  # no CCCD subscription: the peripheral's notification goes nowhere
    every = c.get('drop_every', 0)
    if every:
        c['sent'] = c.get('sent', 0) + 1
        if c['sent'] % every == 0:
            return False  # lost on the air (a radio drop the link layer did not repair)
    c['value'] = bytes(data)
    _set_props(mockobject.objects[ch_path], CHAR_IFACE,
               {'Value': dbus.Array(c['value'], signature='y', variant_level=1)})
    return True


@dbus.service.method(MOCK_IFACE, in_signature='oay', out_signature='b')
def EmitNotification(self, ch, value):
    return _notify(str(ch), bytes(value))


@dbus.service.method(MOCK_IFACE, in_signature='oo', out_signature='')
def SetLoopback(self, rx, tx):
    loopback[str(rx)] = str(tx)


@dbus.service.method(MOCK_IFACE, in_signature='o', out_signature='aay')
def GetWrittenValues(self, ch):
    return dbus.Array([dbus.ByteArray(v) for v in chars[str(ch)]['written']], signature='ay')


@dbus.service.method(MOCK_IFACE, in_signature='o', out_signature='b')
def DropConnection(self, dev):
    '''Link loss seen from the host (supervision timeout): no reply to anyone, just the signals.'''
    return _drop_link(str(dev))


@dbus.service.method(MOCK_IFACE, in_signature='ou', out_signature='')
def DropNotifications(self, ch, every):
    '''Loses every `every`-th notification of a characteristic (0: none).'''
    chars[str(ch)]['drop_every'] = int(every)


@dbus.service.method(MOCK_IFACE, in_signature='o', out_signature='')
def DropOnNextAccess(self, dev):
    '''The next GATT request on the device loses the link before its answer (a request in flight).'''
    devices[str(dev)]['drop_on_access'] = True


@dbus.service.method(MOCK_IFACE, in_signature='ous', out_signature='')
def FailNextConnects(self, dev, count, error_name):
    devices[str(dev)]['fail_connects'] = int(count)
    devices[str(dev)]['fail_name'] = str(error_name) or 'Failed'


@dbus.service.method(MOCK_IFACE, in_signature='u', out_signature='')
def SetResolveDelay(self, ms):
    settings['resolve_delay_ms'] = int(ms)


@dbus.service.method(MOCK_IFACE, in_signature='q', out_signature='')
def SetMtu(self, mtu):
    '''ATT MTU of links resolved from now on (exported as GattCharacteristic1.MTU, BlueZ >= 5.62).'''
    settings['mtu'] = int(mtu)


@dbus.service.method(MOCK_IFACE, in_signature='o', out_signature='')
def ForgetDevice(self, dev):
    RemoveDevice(None, dev)


@dbus.service.method(MOCK_IFACE, in_signature='ou', out_signature='')
def DropWrites(self, ch, every):
    '''Loses every `every`-th write to a characteristic after answering it (0: none).'''
    chars[str(ch)]['drop_writes_every'] = int(every)


def _start_board(rx, tx, argv):
    '''Runs the board helper behind rx/tx. Its stdout is watched on the GLib loop; each read is
    notified on tx in pieces of the current payload size (a board's UART-to-BLE bridge).'''
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    boards[rx] = {'proc': proc, 'tx': tx}

    def on_output(fd, condition):
        try:
            data = os.read(fd, 4096)
        except OSError:
            return False
        if not data:
            return False
        step = max(settings['mtu'] - 3, 1)
        for i in range(0, len(data), step):
            _notify(tx, data[i:i + step])  # lost when nobody is subscribed or the link is down
        return True

    GLib.io_add_watch(proc.stdout.fileno(), GLib.PRIORITY_DEFAULT, GLib.IO_IN | GLib.IO_HUP, on_output)
