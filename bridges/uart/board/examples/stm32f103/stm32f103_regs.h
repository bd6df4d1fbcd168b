/* The few STM32F103 registers the example uses, written by hand from RM0008 (Debian ships no
 * vendor CMSIS headers). Addresses: RM0008 section 3.3 memory map; bit positions: the sections
 * named beside each block. */
#ifndef STM32F103_REGS_H
#define STM32F103_REGS_H

#include <stdint.h>

#define REG32(addr) (*(volatile uint32_t *)(addr))

/* RCC (RM0008 7.3) */
#define RCC_BASE 0x40021000u
#define RCC_CR REG32(RCC_BASE + 0x00u)
#define RCC_CFGR REG32(RCC_BASE + 0x04u)
#define RCC_AHBENR REG32(RCC_BASE + 0x14u)
#define RCC_APB2ENR REG32(RCC_BASE + 0x18u)
#define RCC_APB1ENR REG32(RCC_BASE + 0x1Cu)
#define RCC_CR_HSEON (1u << 16)
#define RCC_CR_HSERDY (1u << 17)
#define RCC_CR_PLLON (1u << 24)
#define RCC_CR_PLLRDY (1u << 25)
#define RCC_CFGR_SW_PLL (2u << 0)
#define RCC_CFGR_SWS_MASK (3u << 2)
#define RCC_CFGR_SWS_PLL (2u << 2)
#define RCC_CFGR_PPRE1_DIV2 (4u << 8)
#define RCC_CFGR_PLLSRC_HSE (1u << 16)
#define RCC_CFGR_PLLMUL9 (7u << 18)
#define RCC_AHBENR_DMA1EN (1u << 0)
#define RCC_APB2ENR_IOPAEN (1u << 2)
#define RCC_APB2ENR_USART1EN (1u << 14)
#define RCC_APB1ENR_BKPEN (1u << 27)
#define RCC_APB1ENR_PWREN (1u << 28)

/* Flash interface (RM0008 3.3.3): 2 wait states above 48 MHz, prefetch on. */
#define FLASH_ACR REG32(0x40022000u)
#define FLASH_ACR_LATENCY_2 (2u << 0)
#define FLASH_ACR_PRFTBE (1u << 4)

/* PWR and backup registers (RM0008 5.4, 6.4): a session counter that survives resets. */
#define PWR_CR REG32(0x40007000u)
#define PWR_CR_DBP (1u << 8)
#define BKP_DR1 REG32(0x40006C04u)

/* GPIOA (RM0008 9.2): PA9 = USART1_TX, PA10 = USART1_RX. */
#define GPIOA_CRH REG32(0x40010804u)

/* USART1 (RM0008 27.6) */
#define USART1_BASE 0x40013800u
#define USART1_SR REG32(USART1_BASE + 0x00u)
#define USART1_DR REG32(USART1_BASE + 0x04u)
#define USART1_BRR REG32(USART1_BASE + 0x08u)
#define USART1_CR1 REG32(USART1_BASE + 0x0Cu)
#define USART1_CR3 REG32(USART1_BASE + 0x14u)
#define USART_SR_IDLE (1u << 4)
#define USART_SR_TXE (1u << 7)
#define USART_SR_TC (1u << 6)
#define USART_CR1_RE (1u << 2)
#define USART_CR1_TE (1u << 3)
#define USART_CR1_IDLEIE (1u << 4)
#define USART_CR1_UE (1u << 13)
#define USART_CR3_DMAR (1u << 6)

/* DMA1 channel 5 = USART1_RX (RM0008 13.3.7, table 78; registers 13.4) */
#define DMA1_BASE 0x40020000u
#define DMA1_ISR REG32(DMA1_BASE + 0x00u)
#define DMA1_IFCR REG32(DMA1_BASE + 0x04u)
#define DMA1_CCR5 REG32(DMA1_BASE + 0x08u + 20u * 4u)
#define DMA1_CNDTR5 REG32(DMA1_BASE + 0x0Cu + 20u * 4u)
#define DMA1_CPAR5 REG32(DMA1_BASE + 0x10u + 20u * 4u)
#define DMA1_CMAR5 REG32(DMA1_BASE + 0x14u + 20u * 4u)
#define DMA_CCR_EN (1u << 0)
#define DMA_CCR_TCIE (1u << 1)
#define DMA_CCR_HTIE (1u << 2)
#define DMA_CCR_CIRC (1u << 5)
#define DMA_CCR_MINC (1u << 7)
#define DMA_CCR_PL_HIGH (2u << 12)
#define DMA_IFCR_CGIF5 (1u << 16) /* clears every flag of channel 5 */

/* Cortex-M3 core: SysTick (PM0056 4.5) and NVIC (PM0056 4.3) */
#define SYST_CSR REG32(0xE000E010u)
#define SYST_RVR REG32(0xE000E014u)
#define SYST_CVR REG32(0xE000E018u)
#define NVIC_ISER(n) REG32(0xE000E100u + 4u * (n))
#define NVIC_IPR_BYTE(irq) (*(volatile uint8_t *)(0xE000E400u + (irq)))

/* IRQ numbers (RM0008 table 63) */
#define IRQ_DMA1_CHANNEL5 15u
#define IRQ_USART1 37u
#define IRQ_COUNT 43u /* medium-density devices (the C8 is one) */

#endif /* STM32F103_REGS_H */
