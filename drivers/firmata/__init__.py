"""The ``firmata`` driver: an Arduino-class board running StandardFirmata/FirmataExpress as the DAQ.

:mod:`drivers.firmata.protocol` is the sans-IO codec, :mod:`drivers.firmata.driver` the driver.
"""
