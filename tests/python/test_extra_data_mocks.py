"""Runs laid out like EXtra-data's own test fixtures (extra_data/tests/make_examples.py and the
device classes of extra_data/tests/mockdata/*.py), mounted with mount.h5direct and compared, key
by key, with arrays read back from the HDF5 files with h5py the way EXtra-data reads them.

The writers below are re-implemented from reading EXtra-data's mock writers (base.py: DeviceBase,
write_metadata, write_base_index; mkfile.py: write_file; xgm.py; gec_camera.py; basler_camera.py;
detectors.py: AGIPD / LPD / DSSC modules; jungfrau.py; proc.py: ReconstructedDLD6;
make_examples.py: make_spb_run, make_reduced_spb_run, make_fxe_run, make_jungfrau_run,
make_remi_run, make_scs_run, make_agipd_example_file). They create the same datasets (names,
dtypes, shapes, maxshape, hence h5py's automatic chunking), INDEX (first/count, padded
INDEX/trainId, the legacy first/last/status of the AGIPD example file), METADATA (0.5 and 1.x
layouts, source lists padded with empty entries) and train IDs. Differences, for speed only:
fewer trains / frames / modules, smaller camera sensors; and, since EXtra-data's writers leave
most datasets unwritten (all fill value), a fill pass writes deterministic values into most
datasets afterwards (padding rows included, so rows outside the index would show up), leaving
some datasets unwritten and writing only a few rows of very large ones (unallocated chunks).

The oracle is independent of the writers: for every sequence file in train order, for every
train of INDEX/trainId (zeros dropped) the rows INDEX/<src>/<group>/first .. +count of the key's
dataset (count = (last - first + 1) * status for the legacy index), concatenated: what
run[source, key].ndarray() returns, and the train ID of every row.
"""
import json
import os
import os.path as osp
import re
import shutil
import sys
import zlib
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

h5py = pytest.importorskip('h5py')

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from h5d_testlib import BIN, Mount, descr_to_dtype, make_tmpdir, values_equal  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN or not osp.exists(BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')

vlen_bytes = h5py.special_dtype(vlen=bytes)


# --- EXtra-data's mock devices, re-implemented --------------------------------------------

class Device:
    """After mockdata/base.py DeviceBase."""
    control_keys = []
    extra_run_values = []   # (topic, dtype, value)
    output_channels = ()
    instrument_keys = []

    ntrains = 400
    firsttrain = 10000
    chunksize = 200

    def __init__(self, device_id, nsamples=None, no_ctrl_data=False):
        self.device_id = device_id
        self.nsamples = nsamples
        self.no_ctrl_data = no_ctrl_data

    def write_control(self, f):
        n = self.ntrains
        dev = self.device_id
        first = f.create_dataset(f'INDEX/{dev}/first', (n,), 'u8', maxshape=(None,))
        count = f.create_dataset(f'INDEX/{dev}/count', (n,), 'u8', maxshape=(None,))
        first[:] = 0 if self.no_ctrl_data else np.arange(n)
        count[:] = 0 if self.no_ctrl_data else 1
        rows = 0 if self.no_ctrl_data else n
        dims = ()
        for topic, dt, dims in self.control_keys:
            f.create_dataset(f'CONTROL/{dev}/{topic}/timestamp', (rows,), 'u8', maxshape=(None,))
            f.create_dataset(f'CONTROL/{dev}/{topic}/value', (rows,) + dims, dt,
                             maxshape=(None,) + dims)
            f.create_dataset(f'RUN/{dev}/{topic}/timestamp', (1,), 'u8', maxshape=(None,))
            f.create_dataset(f'RUN/{dev}/{topic}/value', (1,) + dims, dt, maxshape=(None,) + dims)
        for topic, dt, value in self.extra_run_values:
            if isinstance(value, str):
                dt = h5py.string_dtype('ascii')
            f.create_dataset(f'RUN/{dev}/{topic}/timestamp', (1,), 'u8', maxshape=(None,))
            f.create_dataset(f'RUN/{dev}/{topic}/value', (1,) + dims, dt, data=[value],
                             maxshape=(None,) + dims)

    def write_instrument(self, f):
        t0, nt = self.firsttrain, self.ntrains
        if self.nsamples is None:
            self.nsamples = nt
        ns = self.nsamples
        if nt == 0:
            first, count, tids = [], [], []
        elif ns == 0:
            first = count = 0
            tids = []
        elif ns < nt:   # samples spread over the trains: counts 0 or 1
            first = np.linspace(0, ns, endpoint=False, num=nt, dtype='u8')
            count = np.zeros(nt, 'u8')
            count[:-1] = first[1:] - first[:-1]
            if count.sum() < ns:
                count[-1] = 1
            assert count.sum() == ns
            tids = np.linspace(t0, t0 + nt, endpoint=False, num=ns, dtype='u8')
        elif ns == nt:
            first, count, tids = np.arange(nt), 1, np.arange(t0, t0 + nt)
        else:
            count = ns // nt
            first = np.arange(0, ns, step=count)
            tids = np.repeat(np.arange(t0, t0 + nt), count)
        npad = ns + (-ns) % self.chunksize
        for chan in self.output_channels:
            dc = f'{self.device_id}:{chan}'
            i_first = f.create_dataset(f'INDEX/{dc}/first', (nt,), 'u8', maxshape=(None,))
            i_count = f.create_dataset(f'INDEX/{dc}/count', (nt,), 'u8', maxshape=(None,))
            i_first[:] = first
            i_count[:] = count
            tid = f.create_dataset(f'INSTRUMENT/{dc}/trainId', (npad,), 'u8', maxshape=(None,))
            if len(tids):
                tid[:ns] = tids
            for topic, dt, dims in self.instrument_keys:
                f.create_dataset(f'INSTRUMENT/{dc}/{topic}', (npad,) + dims, dt,
                                 maxshape=(None,) + dims)

    def post_fill(self, f):
        """What the device classes write after creating their datasets (runs after our fill)."""

    def datasource_ids(self):
        if self.control_keys:
            yield 'CONTROL/' + self.device_id
        if self.instrument_keys:
            for chan in self.output_channels:
                yield f'INSTRUMENT/{self.device_id}:{chan}'


class XGM(Device):
    control_keys = [('state', h5py.string_dtype(), ())] + [
        (k, dt, ()) for k, dt in [
            ('beamPosition/ixPos', 'f4'), ('beamPosition/iyPos', 'f4'),
            ('current/bottom/output', 'f4'), ('current/bottom/rangeCode', 'i4'),
            ('current/left/output', 'f4'), ('current/left/rangeCode', 'i4'),
            ('current/right/output', 'f4'), ('current/right/rangeCode', 'i4'),
            ('current/top/output', 'f4'), ('current/top/rangeCode', 'i4'),
            ('gasDosing/measuredPressure', 'f4'), ('gasDosing/pressureSetPoint', 'f4'),
            ('gasSupply/gasTypeId', 'i4'), ('gasSupply/gsdCompatId', 'i4'),
            ('pollingInterval', 'i4'), ('pressure/dcr', 'f4'), ('pressure/gasType', 'i4'),
            ('pressure/pressure1', 'f4'), ('pressure/pressureFiltered', 'f4'),
            ('pressure/rd', 'f4'), ('pressure/rsp', 'f4'), ('pulseEnergy/conversion', 'f8'),
            ('pulseEnergy/crossUsed', 'f4'), ('pulseEnergy/gammaUsed', 'f4'),
            ('pulseEnergy/gmdError', 'i4'), ('pulseEnergy/nummberOfBrunches', 'f4'),
            ('pulseEnergy/photonFlux', 'f4'), ('pulseEnergy/pressure', 'f4'),
            ('pulseEnergy/temperature', 'f4'), ('pulseEnergy/usedGasType', 'i4'),
            ('pulseEnergy/wavelengthUsed', 'f4'), ('signalAdaption/dig', 'i4')]]
    extra_run_values = [('classId', None, 'DoocsXGM')]
    output_channels = ('output/data',)
    instrument_keys = [(k, 'f4', (1000,)) for k in (
        'intensityTD', 'intensityAUXTD', 'intensitySigma/x_data', 'intensitySigma/y_data',
        'xTD', 'yTD')]

    def write_instrument(self, f):
        super().write_instrument(f)
        ds = f[f'INSTRUMENT/{self.device_id}:output/data/intensityTD']
        ds.attrs['metricPrefixEnum'] = np.array([14], np.int32)
        ds.attrs['metricPrefixName'] = b'micro'
        ds.attrs['metricPrefixSymbol'] = b'u'
        ds.attrs['unitEnum'] = np.array([15], np.int32)
        ds.attrs['unitName'] = b'joule'
        ds.attrs['unitSymbol'] = b'J'
        grp = f[f'CONTROL/{self.device_id}/beamPosition/ixPos']
        grp.attrs['alias'] = b'IX.POS'
        grp.attrs['description'] = b'Calculated X position [mm]'
        grp.attrs['daqPolicy'] = np.array([-1], np.int32)
        grp['value'].attrs['alias'] = b'IX.POS'
        grp['value'].attrs['daqPolicy'] = np.array([1], np.int32)
        st = f[f'CONTROL/{self.device_id}/state/value']
        if st.shape[0]:
            st[:self.ntrains] = b'ON'
            st[:5] = b'OFF'


class CameraBase(Device):
    output_channels = ('daqOutput/data',)
    pixels_shape = (255, 1024)
    dims_value = (1024, 255)

    def post_fill(self, f):
        for chan in self.output_channels:
            g = f[f'INSTRUMENT/{self.device_id}:{chan}/image']
            g['bitsPerPixel'][:self.nsamples] = 16
            g['dims'][:self.nsamples] = self.dims_value


class GECCamera(CameraBase):
    control_keys = [(k, dt, ()) for k, dt in [
        ('acquisitionTime', 'f4'), ('binningX', 'i4'), ('binningY', 'i4'), ('coolingLevel', 'i4'),
        ('cropLines', 'i4'), ('enableBiasCorrection', 'u1'), ('enableBurstMode', 'u1'),
        ('enableCooling', 'u1'), ('enableCropMode', 'u1'), ('enableExtTrigger', 'u1'),
        ('enableShutter', 'u1'), ('enableSync', 'u1'), ('exposureTime', 'i4'),
        ('firmwareVersion', 'i4'), ('modelId', 'i4'), ('numPixelInX', 'i4'),
        ('numPixelInY', 'i4'), ('numberOfCoolingLevels', 'i4'), ('numberOfMeasurements', 'i4'),
        ('pixelSize', 'f4'), ('readOutSpeed', 'i4'), ('shutterCloseTime', 'i4'),
        ('shutterOpenTime', 'i4'), ('shutterState', 'i4'), ('syncHigh', 'u1'),
        ('targetTemperature', 'i4'), ('temperatureBack', 'f4'), ('temperatureSensor', 'f4'),
        ('triggerTimeOut', 'i4'), ('updateInterval', 'i4')]]
    instrument_keys = [('image/bitsPerPixel', 'i4', ()), ('image/dimTypes', 'i4', (2,)),
                       ('image/dims', 'u8', (2,)), ('image/encoding', 'i4', ()),
                       ('image/pixels', 'u2', (255, 1024)), ('image/roiOffsets', 'u8', (2,))]


class BaslerCamera(CameraBase):
    def __init__(self, device_id, nsamples=None, sensor_size=None):
        super().__init__(device_id, nsamples=nsamples)
        self.sensor_size = tuple(sensor_size or (2058, 2456))
        self.dims_value = self.sensor_size
        self.instrument_keys = [
            ('image/bitsPerPixel', 'i4', ()), ('image/dimTypes', 'i4', (2,)),
            ('image/dims', 'u8', (2,)), ('image/encoding', 'i4', ()),
            ('image/pixels', 'u2', self.sensor_size), ('image/roiOffsets', 'u8', (2,)),
            ('image/binning', 'u8', (2,)), ('image/flipX', 'u1', ()), ('image/flipY', 'u1', ())]


class JUNGFRAUModule(Device):
    output_channels = ('daqOutput/data',)
    instrument_keys = [('adc', 'u2', (16, 512, 1024)), ('frameNumber', 'u8', (16,)),
                       ('gain', 'u1', (16, 512, 1024)), ('memoryCell', 'u1', (16,)),
                       ('timestamp', 'f8', (16,))]


class JUNGFRAUControl(Device):
    control_keys = [(k, dt, d) for k, dt, d in [
        ('acquisitionTime', 'f4', ()), ('angDir', 'i2', (1000,)), ('binSize', 'f4', (1000,)),
        ('bitDepth', 'i4', ()), ('dataStorage.enable', 'u1', ()),
        ('dataStorage.fileIndex', 'i4', ()), ('delayAfterTrigger', 'f4', (1000,)),
        ('detectorHostPort', 'u2', (1000,)), ('detectorHostStopPort', 'u2', (1000,)),
        ('exposurePeriod', 'f4', ()), ('exposureTime', 'f4', ()), ('exposureTimeout', 'u4', ()),
        ('exposureTimer', 'u2', ()), ('globalOff', 'f4', (1000,)),
        ('heartbeatInterval', 'i4', ()), ('lock', 'i2', (1000,)), ('master', 'i2', ()),
        ('maximumDetectorSize', 'i4', (1000,)), ('moveFlag', 'i2', (1000,)),
        ('numberOfCycles', 'i8', ()), ('numberOfFrames', 'i8', ()), ('numberOfGates', 'i8', ()),
        ('online', 'i2', (1000,)), ('performanceStatistics.enable', 'u1', ()),
        ('performanceStatistics.maxEventLoopLatency', 'u4', ()),
        ('performanceStatistics.maxProcessingLatency', 'u4', ()),
        ('performanceStatistics.messagingProblems', 'u1', ()),
        ('performanceStatistics.numMessages', 'u4', ()),
        ('performanceStatistics.processingLatency', 'f4', ()), ('pollingInterval', 'u4', ()),
        ('progress', 'i4', ()), ('rOnline', 'i2', ()), ('rxTcpPort', 'u2', (1000,)),
        ('rxUdpPort', 'u2', (1000,)), ('rxUdpSocketSize', 'u4', ()),
        ('storageCellStart', 'i2', ()), ('storageCells', 'i2', ()), ('threaded', 'i2', ()),
        ('triggerPeriod', 'f4', ()), ('vHighVoltage', 'u4', (1000,)),
        ('vHighVoltageMax', 'u4', ())]]


class JUNGFRAUMonitor(Device):
    control_keys = [(f'module{n}.{t}', 'f8', ()) for n in range(1, 9)
                    for t in ('adcTemperature', 'fpgaTemperature')]


class JUNGFRAUPower(Device):
    control_keys = [(k, 'f8' if k != 'port' else 'u2', ())
                    for k in ('current', 'pollingInterval', 'port', 'temperature', 'voltage')]


class ReconstructedDLD6(Device):
    hits_dt = np.dtype([('x', 'f8'), ('y', 'f8'), ('t', 'f8'), ('m', 'i4')])
    signals_dt = np.dtype([(k, 'f8') for k in ('u1', 'u2', 'v1', 'v2', 'w1', 'w2', 'mcp')])
    output_channels = ('output/rec',)
    instrument_keys = [('signals', signals_dt, (50,)), ('hits', hits_dt, (50,))]
    extra_run_values = [('digitizer/baseline_region', None, ':1000')]


class DetectorModule:
    """After mockdata/detectors.py DetectorModule (XTDF: detector, header, image, trailer)."""
    image_dims = ()
    detector_data_size = 0
    ntrains, firsttrain, chunksize = 100, 10000, 32
    parts = ['detector', 'header', 'image', 'trailer']

    def __init__(self, device_id, frames_per_train=64, raw=True):
        self.device_id = device_id
        self._fpt = frames_per_train
        self.raw = raw
        if not raw:
            self.image_dims = self.image_dims[1:]

    def write_control(self, f):
        pass

    def post_fill(self, f):
        pass

    @property
    def frames_per_train(self):
        if np.ndim(self._fpt) == 0:
            return np.full(self.ntrains, self._fpt, np.uint64)
        return np.asarray(self._fpt, np.uint64)

    def write_instrument(self, f):
        dc = f'{self.device_id}:xtdf'
        tids = np.arange(self.firsttrain, self.firsttrain + self.ntrains)
        npad = self.ntrains + (-self.ntrains) % self.chunksize
        fpt = self.frames_per_train
        for part in self.parts:
            i_first = f.create_dataset(f'INDEX/{dc}/{part}/first', (self.ntrains,), 'u8',
                                       maxshape=(None,))
            i_count = f.create_dataset(f'INDEX/{dc}/{part}/count', (self.ntrains,), 'u8',
                                       maxshape=(None,))
            if part == 'image':
                i_first[1:] = np.cumsum(fpt)[:-1]   # first[0] is never written
                i_count[:] = fpt
            else:
                i_first[:] = np.arange(self.ntrains)
                i_count[:] = 1
        nframes = int(fpt.sum())
        tid_index = np.repeat(tids, fpt.astype(np.intp))
        pid_index = np.concatenate([np.arange(0, n, dtype='u8') for n in fpt])
        for name, dt, vals in (('trainId', 'u8', tid_index), ('pulseId', 'u8', pid_index),
                               ('cellId', 'u2', pid_index)):
            p = f'INSTRUMENT/{dc}/image/{name}'
            if self.raw:
                ds = f.create_dataset(p, (nframes, 1), dt, maxshape=(None, 1))
                ds[:, 0] = vals
            else:
                f.create_dataset(p, (nframes,), dt, chunks=True, data=vals)
        if self.raw:
            image_keys = [('data', 'u2', self.image_dims), ('length', 'u4', (1,)),
                          ('status', 'u2', (1,))]
        else:
            image_keys = [('data', 'f4', self.image_dims), ('mask', 'u4', self.image_dims),
                          ('gain', 'u1', self.image_dims), ('length', 'u4', (1,)),
                          ('status', 'u2', (1,))]
        max_len = None if self.raw else nframes
        for key, dt, dims in image_keys:
            f.create_dataset(f'INSTRUMENT/{dc}/image/{key}', (nframes,) + dims, dt,
                             maxshape=(max_len,) + dims)
        for part in ('detector', 'header', 'trailer'):
            ds = f.create_dataset(f'INSTRUMENT/{dc}/{part}/trainId', (npad,), 'u8',
                                  maxshape=(None,))
            ds[:self.ntrains] = tids
        other = [('detector/data', 'u1', (self.detector_data_size,)),
                 ('header/dataId', 'u8', ()), ('header/linkId', 'u8', ()),
                 ('header/magicNumberBegin', 'i1', (8,)),
                 ('header/majorTrainFormatVersion', 'u4', ()),
                 ('header/minorTrainFormatVersion', 'u4', ()), ('header/pulseCount', 'u8', ()),
                 ('header/reserved', 'u1', (16,)), ('trailer/checksum', 'i1', (16,)),
                 ('trailer/magicNumberEnd', 'i1', (8,)), ('trailer/status', 'u8', ())]
        for key, dt, dims in other:
            f.create_dataset(f'INSTRUMENT/{dc}/{key}', (npad,) + dims, dt,
                             maxshape=(None,) + dims)

    def datasource_ids(self):
        for part in self.parts:
            yield f'INSTRUMENT/{self.device_id}:xtdf/{part}'


class AGIPDModule(DetectorModule):
    image_dims = (2, 512, 128)
    detector_data_size = 5408


class LPDModule(DetectorModule):
    image_dims = (1, 256, 256)
    detector_data_size = 416


class DSSCModule(DetectorModule):
    image_dims = (1, 128, 512)
    detector_data_size = 416


# --- file writing (mkfile.write_file, base.write_metadata / write_base_index) -------------

def write_base_index(f, n, first=10000, chunksize=16, format_version='0.5'):
    npad = n + (-n) % chunksize
    if format_version != '0.5':
        f.create_dataset('INDEX/flag', (npad,), 'i4', maxshape=(None,))[:n] = 1
        ts = datetime.now(tz=timezone.utc).timestamp() * 10**9
        f.create_dataset('INDEX/timestamp', (npad,), 'u8', maxshape=(None,))[:n] = \
            [ts + i * 10**8 for i in range(n)]
    if tuple(int(x) for x in format_version.split('.')) >= (1, 2):
        f.create_dataset('INDEX/origin', (npad,), 'i4', maxshape=(None,))[:n] = -1
    f.create_dataset('INDEX/trainId', (npad,), 'u8', maxshape=(None,))[:n] = \
        np.arange(first, first + n)


def write_metadata(f, data_sources, chunksize=16, format_version='0.5'):
    n = len(data_sources) + (-len(data_sources)) % chunksize
    grp = f.create_group('METADATA' if format_version == '0.5' else 'METADATA/dataSources')
    for name, vals in (('dataSourceId', data_sources),
                       ('root', [d.split('/', 1)[0] for d in data_sources]),
                       ('deviceId', [d.split('/', 1)[1] for d in data_sources])):
        grp.create_dataset(name, (n,), dtype=vlen_bytes, maxshape=(None,))[:len(vals)] = vals
    if format_version != '0.5':
        now = datetime.utcnow().replace(microsecond=0)
        f['METADATA/dataFormatVersion'] = [format_version.encode('ascii')]
        f['METADATA/creationDate'] = [now.strftime('%Y%m%dT%H%M%SZ').encode('ascii')]
        f['METADATA/daqLibrary'] = [b'1.9.0']
        f['METADATA/karaboFramework'] = [b'2.7.0']
        f.create_dataset('METADATA/proposalNumber', dtype=np.uint32, data=[700000])
        f.create_dataset('METADATA/runNumber', dtype=np.uint32,
                         data=[int(re.findall(r'.*-R([0-9]+)-.*', f.filename)[0])])
        f['METADATA/runType'] = [b'Test DAQ']
        f['METADATA/sample'] = [b'No Sample']
        m = re.match(r'^(RAW|CORR)\-R\d+\-.*\-S(\d+).h5$', osp.basename(f.filename))
        f.create_dataset('METADATA/sequenceNumber', dtype=np.uint32,
                         data=[int(m[2]) if m else 0])
        f['METADATA/updateDate'] = [(now + timedelta(minutes=5)).strftime(
            '%Y%m%dT%H%M%SZ').encode('ascii')]


def write_file(path, devices, ntrains, firsttrain=10000, chunksize=200, format_version='0.5'):
    with h5py.File(path, 'w') as f:
        f.create_group('RUN')
        write_base_index(f, ntrains, first=firsttrain, chunksize=chunksize,
                         format_version=format_version)
        sources = []
        for dev in devices:
            dev.ntrains, dev.firsttrain, dev.chunksize = ntrains, firsttrain, chunksize
            dev.write_control(f)
            dev.write_instrument(f)
            sources.extend(dev.datasource_ids())
        write_metadata(f, sources, chunksize=chunksize, format_version=format_version)
        fill_datasets(f)
        for dev in devices:
            dev.post_fill(f)


# --- content: EXtra-data's writers leave data unwritten; most of it gets values here --------

def _pattern(dtype, shape, seed, rows):
    """Deterministic values for the given rows (an index array) of a dataset."""
    dtype = np.dtype(dtype)
    per = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    base = (np.asarray(rows, np.int64)[:, None] * 1009 + seed
            + np.arange(per, dtype=np.int64)[None, :]).reshape((len(rows),) + tuple(shape[1:]))

    def conv(dt, vals):
        if dt.kind == 'f':
            return ((vals % 100003).astype(dt) / dt.type(4)) - dt.type(7)
        return vals.astype(dt)

    if dtype.names:
        out = np.zeros(base.shape, dtype)
        for i, name in enumerate(dtype.names):
            out[name] = conv(dtype.fields[name][0], base * 3 + i)
        return out
    return conv(dtype, base)


def fill_datasets(f):
    """Values in every CONTROL / INSTRUMENT dataset the writers left unwritten, except one in
    five or so (reads of unallocated chunks: zeros); of rows over 1 MiB only two are written."""
    todo = []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            todo.append(name)
    for top in ('CONTROL', 'INSTRUMENT'):
        if top in f:
            f[top].visititems(lambda n, o, t=top: visit(f'{t}/{n}', o))
    for name in todo:
        ds = f[name]
        if ds.dtype.kind == 'O' or ds.id.get_storage_size() or not ds.shape or not ds.shape[0]:
            continue
        seed = zlib.crc32(name.encode()) % 9973
        if seed % 5 == 0:
            continue
        row_bytes = ds.dtype.itemsize * (int(np.prod(ds.shape[1:])) if ds.ndim > 1 else 1)
        n = ds.shape[0]
        if row_bytes > (1 << 20):
            for r in sorted({min(1, n - 1), n - 1}):
                ds[r:r + 1] = _pattern(ds.dtype, ds.shape, seed, [r])
        else:
            step = max(1, (64 << 20) // max(row_bytes, 1))
            for r0 in range(0, n, step):
                r1 = min(n, r0 + step)
                ds[r0:r1] = _pattern(ds.dtype, ds.shape, seed, np.arange(r0, r1))


# --- make_examples.py builders (sizes reduced) -------------------------------------------

def make_spb_run(d, raw=True, format_version='0.5', modules=2, frames=None, sensor_size=(64, 48)):
    """make_spb_run / make_reduced_spb_run: AGIPD modules (64 trains), DA01 S00000 + S00001
    (2 XGMs and a Basler camera, 32 trains each)."""
    prefix = 'RAW' if raw else 'CORR'
    if frames is None:   # make_reduced_spb_run: varying (0 included), equal across modules
        frames = np.random.RandomState(7).randint(0, 3, size=64)
    for modno in range(modules):
        write_file(osp.join(d, f'{prefix}-R0238-AGIPD{modno:0>2}-S00000.h5'),
                   [AGIPDModule(f'SPB_DET_AGIPD1M-1/DET/{modno}CH0', raw=raw,
                                frames_per_train=frames)],
                   ntrains=64, chunksize=32, format_version=format_version)
    if not raw:
        return
    for seq, t0 in ((0, 10000), (1, 10032)):
        write_file(osp.join(d, f'{prefix}-R0238-DA01-S{seq:05d}.h5'),
                   [XGM('SA1_XTD2_XGM/DOOCS/MAIN'), XGM('SPB_XTD9_XGM/DOOCS/MAIN'),
                    BaslerCamera('SPB_IRU_CAM/CAM/SIDEMIC', sensor_size=sensor_size)],
                   ntrains=32, firsttrain=t0, chunksize=32, format_version=format_version)


def make_fxe_run(d, raw=True, missing_data_ratio=0.5, format_version='1.0', modules=2,
                 scale=10):
    """make_fxe_run: LPD modules (480 trains) and DA01 S00000 (400 trains) + S00001 (80 trains,
    from 10400) with 2 XGMs and 2 GEC cameras, the second with missing data; trains / scale."""
    prefix = 'RAW' if raw else 'CORR'
    nt, n0, n1 = 480 // scale, 400 // scale, 80 // scale
    for modno in range(modules):
        write_file(osp.join(d, f'{prefix}-R0450-LPD{modno:0>2}-S00000.h5'),
                   [LPDModule(f'FXE_DET_LPD1M-1/DET/{modno}CH0', raw=raw, frames_per_train=2)],
                   ntrains=nt, chunksize=32, format_version=format_version)
    if not raw:
        return

    def nsamples(n):
        return int((1 - missing_data_ratio) * n)
    write_file(osp.join(d, 'RAW-R0450-DA01-S00000.h5'),
               [XGM('SA1_XTD2_XGM/DOOCS/MAIN'), XGM('SPB_XTD9_XGM/DOOCS/MAIN'),
                GECCamera('FXE_XAD_GEC/CAM/CAMERA'),
                GECCamera('FXE_XAD_GEC/CAM/CAMERA_NODATA', nsamples=nsamples(n0))],
               ntrains=n0, chunksize=200, format_version=format_version)
    write_file(osp.join(d, f'{prefix}-R0450-DA01-S00001.h5'),
               [XGM('SA1_XTD2_XGM/DOOCS/MAIN'), XGM('SPB_XTD9_XGM/DOOCS/MAIN'),
                GECCamera('FXE_XAD_GEC/CAM/CAMERA'),
                GECCamera('FXE_XAD_GEC/CAM/CAMERA_NODATA', nsamples=nsamples(n1))],
               ntrains=n1, firsttrain=10000 + n0, chunksize=200, format_version=format_version)


def make_da_empty_sources(d):
    """After make_da_file_with_empty_source (format 0.5): an INSTRUMENT source with no samples
    at all (nsamples=0: zero-row datasets, first = count = 0), one with samples in half of the
    trains, and a CONTROL source that saved no data (no_ctrl_data: zero-row datasets)."""
    write_file(osp.join(d, 'RAW-R0317-DA01-S00000.h5'),
               [XGM('SA3_XTD10_XGM/XGM/DOOCS'),
                GECCamera('SA3_XTD10_IMGFEL/CAM/BEAMVIEW', nsamples=0),
                GECCamera('SA3_XTD10_IMGFEL/CAM/BEAMVIEW2', nsamples=25),
                GECCamera('SA3_XTD10_VAC/CAM/NOCTRL', no_ctrl_data=True)],
               ntrains=50, chunksize=50, format_version='0.5')


def make_jungfrau_run(d, modules=2, ntrains=3):
    """make_jungfrau_run: JUNGFRAU modules (JNGFR01..) and the control file (format 1.0,
    chunksize 1); 100 trains reduced to a few (a row of data.adc is 16 MiB)."""
    for modno in range(1, modules + 1):
        write_file(osp.join(d, f'RAW-R0012-JNGFR{modno:02}-S00000.h5'),
                   [JUNGFRAUModule(f'SPB_IRDA_JF4M/DET/JNGFR{modno:02}')],
                   ntrains=ntrains, chunksize=1, format_version='1.0')
    write_file(osp.join(d, 'RAW-R0012-JNGFRCTRL00-S00000.h5'),
               [JUNGFRAUControl('SPB_IRDA_JF4M/DET/CONTROL'),
                JUNGFRAUMonitor('SPB_IRDA_JF4M/MDL/MONITOR'),
                JUNGFRAUPower('SPB_IRDA_JF4M/MDL/POWER')],
               ntrains=ntrains, chunksize=1, format_version='1.0')


def make_remi_run(d):
    """make_remi_run: proc/ data with compound dtypes (format 1.0, chunksize 1)."""
    write_file(osp.join(d, 'CORR-R0210-REMI01-S00000.h5'),
               [ReconstructedDLD6('SQS_REMI_DLD6/DET/TOP')],
               ntrains=100, chunksize=1, format_version='1.0')


def make_scs_run(d, modules=2, ntrains=16):
    """make_scs_run: DSSC modules, 2 sequence files each (format 1.0)."""
    for modno in range(modules):
        mod = DSSCModule(f'SCS_DET_DSSC1M-1/DET/{modno}CH0', frames_per_train=2)
        for seq in range(2):
            write_file(osp.join(d, f'RAW-R0163-DSSC{modno:0>2}-S{seq:0>5}.h5'), [mod],
                       ntrains=ntrains, firsttrain=10000 + seq * ntrains, chunksize=32,
                       format_version='1.0')


class StringDevice(Device):
    """String keys: variable-length (CONTROL and INSTRUMENT) and fixed-length, the INSTRUMENT
    ones with padding rows beyond the index holding 'PADDING' (what the DAQ leaves there)."""
    control_keys = [('fixedName', 'S8', ()), ('state', h5py.string_dtype(), ())]
    output_channels = ('output/data',)
    instrument_keys = [('label', h5py.string_dtype(), ()), ('code', 'S6', ())]

    def post_fill(self, f):
        for topic in ('label', 'code'):
            d = f[f'INSTRUMENT/{self.device_id}:output/data/{topic}']
            vals = [f'{topic[0]}{i}.{self.firsttrain - 10000}'.encode()
                    for i in range(self.nsamples)]
            d[:] = vals + [b'PADDING'] * (d.shape[0] - len(vals))
        st = f[f'CONTROL/{self.device_id}/state/value']
        st[:] = [f'S{self.firsttrain + i}'.ljust(self.state_len, '.').encode()
                 for i in range(st.shape[0])]

    state_len = 0


def make_strings_run(d):
    """Two sequence files with string keys (7 samples spread over 10 trains in each, 25 rows of
    padding per INSTRUMENT dataset)."""
    for seq, t0 in ((0, 10000), (1, 10010)):
        write_file(osp.join(d, f'RAW-R0099-DA01-S{seq:05d}.h5'),
                   [StringDevice('SQS_STRINGS/MDL/X', nsamples=7)],
                   ntrains=10, firsttrain=t0, chunksize=32, format_version='1.0')


def make_agipd_example_run(d, ntrains=20, frames=4):
    """make_agipd_example_file: a format 0.5 corrected AGIPD file with the old index
    (first/last/status), INDEX arrays and per-train datasets padded to 256 (250 trains),
    image datasets exactly as long as the data and not chunked; counts reduced."""
    src = 'SPB_DET_AGIPD1M-1/DET/7CH0:xtdf'
    npad = ntrains + 16 - ntrains % 16   # 250 trains: 256
    nfr = ntrains * frames
    tids = np.arange(10000, 10000 + ntrains)
    slow = ['header', 'detector', 'trailer']
    path = osp.join(d, 'CORR-R0803-AGIPD07-S00000.h5')
    with h5py.File(path, 'w') as f:
        f.create_group('RUN')
        write_metadata(f, [f'INSTRUMENT/{src}/{ch}' for ch in slow + ['image']])
        write_base_index(f, ntrains, format_version='0.5')
        for ch in slow + ['image']:
            g = f'INDEX/{src}/{ch}/'
            first = f.create_dataset(g + 'first', (npad,), 'u8', maxshape=(None,))
            last = f.create_dataset(g + 'last', (npad,), 'u8', maxshape=(None,))
            status = f.create_dataset(g + 'status', (npad,), 'u4', maxshape=(None,))
            if ch in slow:
                first[:ntrains] = np.arange(ntrains)
                last[:ntrains] = np.arange(ntrains)
            else:
                first[:ntrains] = np.arange(0, nfr, frames)
                last[:ntrains] = np.arange(frames - 1, nfr, frames)
            status[:ntrains] = 1
        for ch in slow:
            f.create_dataset(f'INSTRUMENT/{src}/{ch}/trainId', (npad,), 'u8',
                             maxshape=(None,))[:ntrains] = tids
        f.create_dataset(f'INSTRUMENT/{src}/image/trainId', (nfr, 1), 'u8')[:, 0] = \
            np.repeat(tids, frames)
        I = f'INSTRUMENT/{src}/'
        f.create_dataset(I + 'detector/data', (npad, 5408), 'u1', maxshape=(None, 5408))
        f.create_dataset(I + 'header/dataId', (npad,), 'u8', maxshape=(None,))
        f.create_dataset(I + 'header/linkId', (npad,), 'u8', maxshape=(None,))[:ntrains] = \
            18446744069414584335
        f.create_dataset(I + 'header/magicNumberBegin', (npad, 8), 'i1', maxshape=(None, 8))
        f.create_dataset(I + 'header/majorTrainFormatVersion', (npad,), 'u4',
                         maxshape=(None,))[:ntrains] = 1
        f.create_dataset(I + 'header/minorTrainFormatVersion', (npad,), 'u4',
                         maxshape=(None,))[:ntrains] = 0
        f.create_dataset(I + 'header/pulseCount', (npad,), 'u8', maxshape=(None,))[:ntrains] = \
            frames
        f.create_dataset(I + 'header/reserved', (npad, 16), 'u1', maxshape=(None, 16))
        f.create_dataset(I + 'image/cellId', (nfr, 1), 'u2')[:, 0] = \
            np.tile(np.arange(frames), ntrains)
        f.create_dataset(I + 'image/data', (nfr, 512, 128), 'f4')
        f.create_dataset(I + 'image/gain', (nfr, 512, 128), 'u1')
        f.create_dataset(I + 'image/length', (nfr, 1), 'u4', maxshape=(None, 1))[:] = 262144
        f.create_dataset(I + 'image/mask', (nfr, 512, 128, 3), 'u1')
        f.create_dataset(I + 'image/pulseId', (nfr, 1), 'u8')[:, 0] = \
            np.tile(np.linspace(0, 125, frames, dtype='u8'), ntrains)
        f.create_dataset(I + 'image/status', (nfr, 1), 'u2')
        f.create_dataset(I + 'trailer/checksum', (npad, 16), 'i1', maxshape=(None, 16))
        f.create_dataset(I + 'trailer/magicNumberEnd', (npad, 8), 'i1', maxshape=(None, 8))
        f.create_dataset(I + 'trailer/status', (npad,), 'u8', maxshape=(None,))
        fill_datasets(f)


# --- the oracle: read the files back as EXtra-data does -----------------------------------

def _str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def read_oracle(run_dir):
    """{'train_ids', 'sources': {src: {'keys': {key: {...}}}}} from the files alone."""
    files = []
    for name in sorted(os.listdir(run_dir)):
        if not name.endswith('.h5'):
            continue
        f = h5py.File(osp.join(run_dir, name), 'r')
        tids = f['INDEX/trainId'][:]
        tids = tids[tids != 0]
        ds = f['METADATA/dataSourceId'] if 'METADATA/dataSourceId' in f else \
            f['METADATA/dataSources/dataSourceId']
        srcs = {}
        for s in (_str(x) for x in ds[:]):
            if not s:
                continue
            section, rest = s.split('/', 1)
            if section == 'INSTRUMENT':
                srcs.setdefault(rest.rsplit('/', 1)[0], 'INSTRUMENT')
            else:
                srcs.setdefault(rest, section)
        files.append((int(tids[0]) if len(tids) else 0, name, f, tids, srcs))
    files.sort(key=lambda t: (t[0], t[1]))   # train order
    run_tids = np.unique(np.concatenate([t[3] for t in files])).astype('u8')

    def index(f, src, grp, n):
        p = f'INDEX/{src}' + (f'/{grp}' if grp else '')
        first = f[p + '/first'][:n].astype(np.int64)
        if 'count' in f[p]:
            count = f[p + '/count'][:n].astype(np.int64)
        else:   # legacy index
            count = (f[p + '/last'][:n].astype(np.int64) - first + 1) * \
                f[p + '/status'][:n].astype(np.int64)
        return first, count

    sources = {}
    for _, name, f, tids, srcs in files:
        for src, section in srcs.items():
            ent = sources.setdefault(src, {'section': section, 'keys': {}, 'files': []})
            ent['files'].append(name)
            root = f[f'{section}/{src}']
            if len(ent['files']) == 1:   # keys from the source's first file
                names = []
                root.visititems(lambda n, o: names.append(n)
                                if isinstance(o, h5py.Dataset) else None)
                for n in names:
                    key = n.replace('/', '.')
                    grp = key.split('.', 1)[0] if section == 'INSTRUMENT' else ''
                    d = root[n]
                    ent['keys'][key] = dict(group=grp, path=n, dtype=d.dtype,
                                            entry_shape=d.shape[1:],
                                            is_array=d.dtype.kind != 'O'
                                            and (h5py.check_string_dtype(d.dtype) is None
                                                 or h5py.check_string_dtype(d.dtype).length
                                                 is not None),
                                            parts=[], tids=[])
            for key, k in ent['keys'].items():
                first, count = index(f, src, k['group'], len(tids))
                d = root[k['path']]
                rows = [d[a:a + c] for a, c in zip(first, count) if c]
                k['parts'].extend(rows)
                k['tids'].append(np.repeat(tids, count))
    for _, _, f, _, _ in files:
        f.close()
    for src, ent in sources.items():
        for key, k in ent['keys'].items():
            k['tids'] = np.concatenate(k['tids']).astype('u8')
            k['data'] = np.concatenate(k.pop('parts')) if k['parts'] else \
                np.zeros((0,) + k['entry_shape'], k['dtype'])
            assert len(k['data']) == len(k['tids'])
    return {'train_ids': run_tids, 'sources': sources}


# --- the checks -----------------------------------------------------------------------------

def check_key(sdir, src, key, k):
    """KEY.json, the train-ID file and (arrays) KEY.npy / .raw of one key against the oracle;
    returns 1 for an array, 0 otherwise."""
    side = json.load(open(osp.join(sdir, key + '.json')))
    assert side['is_array'] == k['is_array'], (src, key, side)
    tids = np.load(osp.join(sdir, side['train_ids']))
    assert tids.dtype == np.uint64
    assert np.array_equal(tids, k['tids']), (src, key)
    if not k['is_array']:
        assert not osp.exists(osp.join(sdir, key + '.npy'))
        # run[source, key].ndarray(): the indexed rows of every file in train order, no padding
        def dec(v):
            return [dec(x) for x in v] if isinstance(v, list) else _str(v)
        assert 'value_cut' not in side, side
        assert side['value'] == dec(k['data'].tolist()), (src, key)
        assert side['value_rows'] == len(k['tids'])
        return 0
    e = k['data']
    assert side['shape'] == list(e.shape), (src, key, side['shape'], e.shape)
    assert side['rows'] == len(e), (src, key)
    dt = descr_to_dtype(side['dtype'])
    assert dt == e.dtype or (e.dtype.names and dt.names == e.dtype.names), \
        (src, key, dt, e.dtype)
    npy = osp.join(sdir, key + '.npy')
    a = np.load(npy)
    assert a.shape == e.shape and a.dtype == dt, (src, key)
    assert values_equal(a, e), (src, key)
    del a
    if e.size:
        m = np.load(npy, mmap_mode='r')
        assert values_equal(m, e), (src, key)
        del m
    assert os.stat(osp.join(sdir, key + '.raw')).st_size == \
        len(e) * dt.itemsize * int(np.prod(e.shape[1:]))
    return 1


def check_mounted_run(root, oracle):
    assert np.array_equal(np.load(osp.join(root, 'trainId.npy')), oracle['train_ids'])
    meta = json.load(open(osp.join(root, 'run.json')))
    assert set(meta['sources']) == set(oracle['sources']), meta.get('errors')
    n_keys = 0
    for src, ent in oracle['sources'].items():
        sdir = osp.join(root, *src.split('/'))
        listed = {n[:-5] for n in os.listdir(sdir)
                  if n.endswith('.json') and not n.startswith('.')}
        assert listed == set(ent['keys']), (src, listed ^ set(ent['keys']))
        for key, k in ent['keys'].items():
            n_keys += check_key(sdir, src, key, k)
    return n_keys


DET_MODULE = re.compile(r'^(?P<det>[^/]+)/DET/(?:JNGFR)?(?P<modno>\d+)(?:CH0:xtdf|:daqOutput)$')


def check_detector_views(root, oracle):
    """The stacked modules-first arrays (AGIPD1M(run)[key].ndarray() etc.), for runs whose
    modules all have the same trains and frame counts (all of EXtra-data's mock runs): each key
    is the module arrays stacked in module order, image.* keys with a leading length-1 entry axis
    squeezed, per-train keys restricted to the trains where the main key has data."""
    dets = {}
    for src in oracle['sources']:
        mt = DET_MODULE.match(src)
        if mt:
            dets.setdefault(mt['det'], []).append((int(mt['modno']), src))
    n = 0
    for det, mods in dets.items():
        mods.sort()
        ddir = osp.join(root, det)
        info = json.load(open(osp.join(ddir, 'detector.json')))
        assert info.get('usable', True), info
        assert not info.get('keys_not_stacked'), info
        keys = [oracle['sources'][s]['keys'] for _, s in mods]
        main = 'data.adc' if 'data.adc' in keys[0] else 'image.data'
        det_trains = np.unique(np.concatenate([k[main]['tids'] for k in keys]))
        for key in keys[0]:
            side = json.load(open(osp.join(ddir, key + '.json')))
            assert side['modules'] == [m for m, _ in mods], (det, key, side['modules'])
            parts = []
            for k in keys:
                d = k[key]['data']
                if key.startswith('image.'):
                    if d.ndim > 1 and d.shape[1] == 1:
                        d = d[:, 0]
                elif main == 'image.data':
                    d = d[np.isin(k[key]['tids'], det_trains)]
                parts.append(d)
            e = np.stack(parts)
            assert side['shape'] == list(e.shape), (det, key, side['shape'], e.shape)
            a = np.load(osp.join(ddir, key + '.npy'), mmap_mode='r')
            assert a.dtype == e.dtype, (det, key)
            assert values_equal(a, e), (det, key)
            del a
            n += 1
    return n


def _run(builder, **kw):
    base = make_tmpdir('edmock-')
    run_dir = osp.join(base, 'r0001')
    os.makedirs(run_dir)
    builder(run_dir, **kw)
    return base, run_dir


@pytest.fixture
def mounted():
    made = []

    def make(builder, **kw):
        base, run_dir = _run(builder, **kw)
        m = Mount(run_dir)
        made.append((m, base))
        return m, run_dir
    yield make
    for m, base in made:
        m.close()
        try:
            os.remove(m.log_path)
        except OSError:
            pass
        shutil.rmtree(base, ignore_errors=True)


CASES = {
    'spb_raw_0.5': (make_spb_run, dict(raw=True, format_version='0.5')),
    'spb_raw_1.0': (make_spb_run, dict(raw=True, format_version='1.0', frames=2)),
    'spb_corr_1.0': (make_spb_run, dict(raw=False, format_version='1.0', modules=1)),
    'fxe_raw_1.0_missing_data': (make_fxe_run, dict(raw=True, missing_data_ratio=0.5)),
    'fxe_raw_0.5_no_data': (make_fxe_run, dict(raw=True, missing_data_ratio=1,
                                                 format_version='0.5')),
    'da_empty_sources_0.5': (make_da_empty_sources, {}),
    'jungfrau_1.0': (make_jungfrau_run, {}),
    'remi_proc_1.0': (make_remi_run, {}),
    'scs_dssc_two_sequences_1.0': (make_scs_run, {}),
    'agipd_example_legacy_index_0.5': (make_agipd_example_run, {}),
    'string_keys_two_sequences_1.0': (make_strings_run, {}),
}


def test_string_values_beyond_the_bound_are_cut_with_a_note(mounted):
    """A string key whose values exceed the .json's bound (1 MiB of values): the first rows,
    exactly as EXtra-data gives them, and value_cut saying how many of how many."""
    class LongStrings(StringDevice):
        state_len = 60

    def build(d):
        write_file(osp.join(d, 'RAW-R0099-DA01-S00000.h5'),
                   [LongStrings('SQS_STRINGS/MDL/X', nsamples=7)],
                   ntrains=20000, firsttrain=10000, chunksize=32, format_version='1.0')
    m, run_dir = mounted(build)
    k = read_oracle(run_dir)['sources']['SQS_STRINGS/MDL/X']['keys']['state.value']
    assert sum(len(x) for x in k['data'].tolist()) > 1 << 20   # beyond the bound
    side = json.load(open(osp.join(m.mnt, 'SQS_STRINGS', 'MDL', 'X', 'state.value.json')))
    n = side['value_rows']
    assert 0 < n < 20000 == len(k['data'])
    assert side['value'] == [_str(x) for x in k['data'][:n].tolist()]
    assert f'cut after {n} of 20000 rows' in side['value_cut'], side['value_cut']
    assert len(json.dumps(side['value'])) <= (1 << 20) + 4 * n


@pytest.mark.parametrize('case', list(CASES))
def test_extra_data_mock_run(mounted, case):
    builder, kw = CASES[case]
    m, run_dir = mounted(builder, **kw)
    oracle = read_oracle(run_dir)
    n = check_mounted_run(m.mnt, oracle)
    assert n >= 3
    n_det = check_detector_views(m.mnt, oracle)
    assert n_det >= (3 if any(DET_MODULE.match(s) for s in oracle['sources']) else 0)
